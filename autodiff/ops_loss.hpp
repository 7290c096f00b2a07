#pragma once
/// Losses with their gradients. A loss is reduced in float32 and returned as a float32 scalar (rank 0)
/// whatever the dtype of its inputs; the gradient of each input has that input's dtype, rounded once,
/// so a loss-scaled gradient underflows (or overflows) in float16 exactly where hardware would.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <span>

namespace mixprec::autodiff {

/// Probabilities are clipped below at this value in sparse_categorical_crossentropy(from_logits = false)
/// (Keras's backend epsilon), so that log(0) never occurs: the loss of a row is at most -ln 1e-7 ≈ 16.1.
inline constexpr float probability_epsilon = 1e-7f;

/// Mean sparse categorical cross-entropy of logits (batch, classes) against integer labels (batch):
///   L = (1/B) Σᵢ -log softmax(zᵢ)[yᵢ],  log softmax(z)ⱼ = zⱼ - m - log Σₖ e^(zₖ - m),  m = maxₖ zₖ
/// fused and computed in float32 (the max is subtracted, so large logits do not overflow).
/// dL/dzᵢⱼ = (softmax(zᵢ)ⱼ - [j = yᵢ]) / B · dL, in the logits' dtype.
/// With from_logits = false, `logits` holds probabilities p (rows that sum to 1; not renormalized):
///   L = (1/B) Σᵢ -log max(pᵢ[yᵢ], probability_epsilon),
///   dL/dpᵢⱼ = -[j = yᵢ] / (B pᵢⱼ) · dL where pᵢⱼ > probability_epsilon, 0 where it was clipped.
/// shape_error unless logits has shape (batch, classes) with batch = labels.size() > 0;
/// std::invalid_argument naming the index and the value of a label outside [0, classes).
Tensor sparse_categorical_crossentropy(std::span<const std::int32_t> labels, const Tensor& logits,
                                       bool from_logits = true);

/// Mean squared error over all n elements: L = (1/n) Σ (y_pred - y_true)², summed in float32.
/// dL/dy_pred = 2 (y_pred - y_true) / n · dL and dL/dy_true = -2 (y_pred - y_true) / n · dL, each in its
/// own tensor's dtype (the two dtypes may differ). shape_error unless the shapes are equal and non-empty.
Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred);

} // namespace mixprec::autodiff
