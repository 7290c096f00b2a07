#pragma once
/// xtensor interop for Tensor. Kept apart from tensor.hpp so that only the files that use xtensor pay
/// for its headers.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

namespace mixprec::autodiff {

/// A tensor holding `values` rounded once to `dtype` (any layout in; row-major storage out).
Tensor from_xarray(const xt::xarray<float>& values, Dtype dtype = Dtype::float32);

/// The tensor's elements widened to float32.
xt::xarray<float> to_xarray(const Tensor& tensor);

/// An xtensor view (no copy) of a float32 tensor's storage; dtype_error for any other dtype.
/// The view refers to the storage: keep the tensor alive while it is used.
inline auto as_xt(Tensor& tensor) {
    auto data = tensor.data<float>();
    std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
    return xt::adapt(data.data(), data.size(), xt::no_ownership(), shape);
}
inline auto as_xt(const Tensor& tensor) {
    auto data = tensor.data<float>();
    std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
    return xt::adapt(data.data(), data.size(), xt::no_ownership(), shape);
}

} // namespace mixprec::autodiff
