#pragma once
/// Elementwise ops with their gradients. Each computes in float32 and rounds its result once to the
/// inputs' dtype; binary ops need equal dtypes and broadcast like NumPy, and their gradients are summed
/// back to each input's shape.

#include <mixprec/autodiff/tensor/tensor.hpp>

namespace mixprec::autodiff {

Tensor add(const Tensor& a, const Tensor& b); ///< d/da = 1, d/db = 1
Tensor sub(const Tensor& a, const Tensor& b); ///< d/da = 1, d/db = -1
Tensor mul(const Tensor& a, const Tensor& b); ///< d/da = b, d/db = a
Tensor div(const Tensor& a, const Tensor& b); ///< d/da = 1/b, d/db = -a/b²

Tensor neg(const Tensor& x);                            ///< d(-x)/dx = -1
Tensor scale(const Tensor& x, float factor);            ///< d(c x)/dx = c
Tensor exp(const Tensor& x);                            ///< d eˣ/dx = eˣ
Tensor log(const Tensor& x);                            ///< d ln x/dx = 1/x
Tensor sqrt(const Tensor& x);                           ///< d √x/dx = 1/(2√x)
Tensor square(const Tensor& x);                         ///< d x²/dx = 2x
Tensor pow(const Tensor& x, float p);                   ///< d xᵖ/dx = p xᵖ⁻¹
Tensor abs(const Tensor& x);                            ///< d |x|/dx = sign(x) (0 at 0)
Tensor relu(const Tensor& x);                           ///< d max(x,0)/dx = [x > 0]
Tensor leaky_relu(const Tensor& x, float slope = 0.2f); ///< d/dx = 1 if x > 0 else slope
Tensor tanh(const Tensor& x);                           ///< d tanh x/dx = 1 - tanh² x
Tensor sigmoid(const Tensor& x);                        ///< d σ(x)/dx = σ(x)(1 - σ(x))
/// GELU, tanh approximation: ½x(1 + tanh(√(2/π)(x + 0.044715x³))); its exact derivative.
Tensor gelu(const Tensor& x);

/// The same values rounded to `dtype`; the gradient is converted back to x's dtype.
Tensor cast(const Tensor& x, Dtype dtype);

/// x itself (sharing its storage) on the way forward; on the way back, dx = factor · dy, rounded in
/// x's dtype: what per-layer loss scaling puts at a layer's output (amp/layer_scales.hpp).
Tensor scale_gradient(const Tensor& x, float factor);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

} // namespace mixprec::autodiff
