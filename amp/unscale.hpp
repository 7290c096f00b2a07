#pragma once
/// The fused pass at the start of every loss-scaled step: for each gradient, one read of its storage
/// (any dtype) that widens it to float32, multiplies by 1/S, checks that every result is finite and adds
/// up the squared norm. A large gradient is spread over the threads in fixed chunks whose sums are added in
/// chunk order: the results and the norm have the same bits on any number of threads and wherever the
/// output lies in memory.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <span>

namespace mixprec::amp {

struct UnscaleResult {
    bool finite = true;      ///< no inf or NaN in grad · (1/S)
    double squared_norm = 0; ///< Σ (grad · 1/S)², meaningful when finite
};

/// out[i] = float(grad[i]) · inverse_scale (out holds grad.size() floats). Returns whether all results
/// are finite and their squared sum. Throws std::invalid_argument if out has the wrong size.
UnscaleResult unscale(const autodiff::Tensor& grad, float inverse_scale, std::span<float> out);

/// The same for out.size() values of `dtype` stored at `values` (a gradient summed across ranks).
UnscaleResult unscale(const void* values, autodiff::Dtype dtype, float inverse_scale, std::span<float> out);

/// The same for float32 values already in memory: values[i] ·= inverse_scale.
UnscaleResult unscale_in_place(std::span<float> values, float inverse_scale);

} // namespace mixprec::amp
