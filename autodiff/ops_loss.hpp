#pragma once
/// Losses with their gradients. A loss is reduced in float32 and returned as a float32 scalar (rank 0)
/// whatever the dtype of its inputs; the gradient of each input has that input's dtype, rounded once,
/// so a loss-scaled gradient underflows (or overflows) in float16 exactly where hardware would.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <span>

namespace mixprec::autodiff {

/// Probabilities are clipped at this value (below; at 1 - ε above where a loss says so) by the cross-entropies
/// with from_logits = false (Keras's backend epsilon), so that log(0) never occurs: -log of a clipped
/// probability is at most -ln 1e-7 ≈ 16.1.
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

/// The losses below compare y_true with y_pred element by element (categorical_crossentropy: row by row).
/// Each term is computed in float32 from the widened inputs and the terms are summed pairwise in float32
/// (error growing with log n); L is that sum divided by n (the element count; B, the batch, for
/// categorical_crossentropy). Both inputs get a gradient, each in its own dtype (the two dtypes may
/// differ), computed in float32 and rounded once. With d = y_pred - y_true:
///   dL/dy_pred = ∂ℓ/∂y_pred / n · dL,  dL/dy_true = ∂ℓ/∂y_true / n · dL  for the per-element term ℓ.
/// shape_error naming both shapes unless they are equal and non-empty.

/// Mean squared error: L = (1/n) Σ d².  dL/dy_pred = 2d/n · dL,  dL/dy_true = -2d/n · dL.
Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred);

/// Mean absolute error: L = (1/n) Σ |d|.  dL/dy_pred = sign(d)/n · dL,  dL/dy_true = -sign(d)/n · dL,
/// with sign(0) = 0 (so an exact prediction gets no gradient) and sign(NaN) = NaN.
Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred);

/// Huber loss (Keras's): L = (1/n) Σ ℓ(d),  ℓ(d) = ½d² if |d| ≤ δ, else δ(|d| - ½δ).
/// dL/dy_pred = ℓ'(d)/n · dL,  dL/dy_true = -ℓ'(d)/n · dL,  ℓ'(d) = d if |d| ≤ δ, else δ sign(d).
/// std::invalid_argument naming δ unless δ > 0 and finite.
Tensor huber(const Tensor& y_true, const Tensor& y_pred, float delta = 1.0f);

/// Binary cross-entropy, y_true = y (targets, usually in [0, 1]), mean over all n elements.
/// From logits z = y_pred, in the form that neither overflows nor loses log(1 + tiny):
///   ℓ = max(z, 0) - z y + log1p(e^(-|z|)),  ∂ℓ/∂z = σ(z) - y,  ∂ℓ/∂y = -z
/// (σ(z) = 1/(1 + e^(-z)) for z ≥ 0, e^z/(1 + e^z) for z < 0, so neither branch overflows).
/// From probabilities p = y_pred (from_logits = false): p is clipped to q = clamp(p, ε, 1 - ε) with
/// ε = probability_epsilon (1 - ε is the float32 1 - 2⁻²³), then
///   ℓ = -(y log q + (1 - y) log1p(-q)),  ∂ℓ/∂p = (q - y) / (q (1 - q)) where ε ≤ p ≤ 1 - ε, 0 where the
///   clip changed p,  ∂ℓ/∂y = log1p(-q) - log q;
/// so p = 0 or 1 gives a finite loss (for y in [0, 1], at most -log ε ≈ 16.1 per element).
Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits);

/// Categorical cross-entropy of y_pred (batch, classes) against one-hot or soft targets y_true = y of the
/// same shape (rows of y need not sum to 1): L = (1/B) Σᵢ Σⱼ -yᵢⱼ log qᵢⱼ.
/// From logits z = y_pred: log qᵢⱼ = zᵢⱼ - mᵢ - log Σₖ e^(zᵢₖ - mᵢ), mᵢ = maxₖ zᵢₖ (so large logits do not
/// overflow), and the exact derivatives of that, for any row sum of y:
///   dL/dzᵢⱼ = (qᵢⱼ Σₖ yᵢₖ - yᵢⱼ) / B · dL,  dL/dyᵢⱼ = -log qᵢⱼ / B · dL.
/// From probabilities p = y_pred (from_logits = false), as Keras 3: each row is first renormalized,
/// rᵢⱼ = pᵢⱼ / sᵢ with sᵢ = Σₖ pᵢₖ, then clipped, qᵢⱼ = clamp(rᵢⱼ, ε, 1 - ε), ε = probability_epsilon.
/// The gradient flows through the renormalization (a clipped entry still moves sᵢ); with Uᵢ the set of
/// entries the clip left alone (ε ≤ rᵢⱼ ≤ 1 - ε):
///   dL/dpᵢⱼ = (Σ_{k ∈ Uᵢ} yᵢₖ - [j ∈ Uᵢ] yᵢⱼ / rᵢⱼ) / (B sᵢ) · dL,  dL/dyᵢⱼ = -log qᵢⱼ / B · dL.
/// A row of p must have a positive sum (a zero row gives NaN). shape_error naming both shapes unless
/// they are equal, of rank 2 and non-empty.
Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits);

} // namespace mixprec::autodiff
