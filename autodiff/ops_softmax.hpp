#pragma once
/// Softmax along one axis (negative counts from the end, -1 is the last), numerically stable: the
/// maximum is subtracted before exponentiating and the statistics (max, Σ exp) are float32, so inputs
/// such as (1000, 1001) are fine in float16. The output is rounded once to x's dtype; the backward
/// recomputes softmax(x) in float32 rather than reading the rounded output.

#include <mixprec/autodiff/tensor/tensor.hpp>

namespace mixprec::autodiff {

/// y = exp(x - max) / Σ exp(x - max).  dx = y ⊙ (dy − Σ dy ⊙ y)
Tensor softmax(const Tensor& x, int axis = -1);

/// y = x - max - log Σ exp(x - max).  dx = dy − softmax(x) Σ dy
Tensor log_softmax(const Tensor& x, int axis = -1);

} // namespace mixprec::autodiff
