#include <mixprec/autodiff/tensor/tensor_xt.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>

namespace mixprec::autodiff {

Tensor from_xarray(const xt::xarray<float>& values, Dtype dtype) {
    const auto& s = values.shape();
    const Shape shape(std::span<const std::size_t>(s.data(), s.size()));
    if (values.layout() == xt::layout_type::row_major)
        return Tensor::from_floats(shape, {values.data(), values.size()}, dtype);
    const xt::xarray<float, xt::layout_type::row_major> row_major = values;
    return Tensor::from_floats(shape, {row_major.data(), row_major.size()}, dtype);
}

xt::xarray<float> to_xarray(const Tensor& tensor) {
    const std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
    xt::xarray<float> out(shape);
    widen(tensor.raw(), tensor.dtype(), out.data(), tensor.size());
    return out;
}

} // namespace mixprec::autodiff
