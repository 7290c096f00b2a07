#pragma once
/// Elementwise kernels on tensors of any dtype, without autodiff. Each reads narrow storage, computes
/// in float32 and rounds the result to the inputs' dtype once. Binary kernels need equal dtypes
/// (dtype_error otherwise) and broadcast like NumPy (shape_error naming both shapes otherwise).

#include <mixprec/autodiff/tensor/tensor.hpp>

namespace mixprec::autodiff::kernels {

Tensor add(const Tensor& a, const Tensor& b);     ///< a + b
Tensor sub(const Tensor& a, const Tensor& b);     ///< a - b
Tensor mul(const Tensor& a, const Tensor& b);     ///< a * b
Tensor div(const Tensor& a, const Tensor& b);     ///< a / b
Tensor maximum(const Tensor& a, const Tensor& b); ///< max(a, b); NaN if either is NaN
Tensor minimum(const Tensor& a, const Tensor& b); ///< min(a, b); NaN if either is NaN

/// Sums x over the axes along which `shape` was broadcast to x's shape (float32 sums, one rounding):
/// the gradient of broadcast_to. shape_error unless `shape` broadcasts to x's shape.
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

Tensor scale(const Tensor& x, float factor); ///< x * factor
Tensor neg(const Tensor& x);                 ///< -x
Tensor abs(const Tensor& x);                 ///< |x|
Tensor exp(const Tensor& x);                 ///< e^x
Tensor log(const Tensor& x);                 ///< ln x
Tensor sqrt(const Tensor& x);                ///< √x
Tensor square(const Tensor& x);              ///< x²
Tensor relu(const Tensor& x);                ///< max(x, 0); NaN stays NaN
Tensor tanh(const Tensor& x);                ///< tanh x
Tensor sigmoid(const Tensor& x);             ///< 1 / (1 + e^-x), evaluated without overflow

} // namespace mixprec::autodiff::kernels
