#pragma once
/// Matrix product with its gradient (shapes and options as kernels::matmul):
///   C = op(A) op(B):  d op(A) = dC op(B)ᵀ,  d op(B) = op(A)ᵀ dC
/// where op transposes when the option says so; a b shared by every batch gets the batch sum.

#include <mixprec/autodiff/tensor/kernels_matmul.hpp>

#include <optional>

namespace mixprec::autodiff {

Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options = {});

/// A dense layer's product: y = x w + bias, for x (batch, in) or (batch, seq, in), w (in, out) and an
/// optional bias (out,), all of one dtype; the bias is added in float32 before the single rounding.
/// dx = dy wᵀ,  dw = xᵀ dy (summed over leading axes),  dbias = Σ dy over every axis but the last.
Tensor dense(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt);

} // namespace mixprec::autodiff
