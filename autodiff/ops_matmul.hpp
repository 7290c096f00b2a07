#pragma once
/// Matrix product with its gradient (shapes and options as kernels::matmul):
///   C = op(A) op(B):  d op(A) = dC op(B)ᵀ,  d op(B) = op(A)ᵀ dC
/// where op transposes when the option says so; a b shared by every batch gets the batch sum.

#include "kernels_matmul.hpp"

namespace mixprec::autodiff {

Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options = {});

} // namespace mixprec::autodiff
