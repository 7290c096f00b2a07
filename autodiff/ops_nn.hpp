#pragma once
/// Neural-network ops with their gradients: layer normalization, embedding lookup and dropout.
/// Each keeps its output in the input's dtype, computes in float32 and rounds its result (and each
/// gradient) once.

#include <mixprec/autodiff/tensor/rng.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <span>

namespace mixprec::autodiff {

/// Layer normalization over the last axis, for x of shape (..., d) and gamma, beta of shape (d,) in x's dtype:
///   x̂ = (x - μ) / √(σ² + ε),  y = γ x̂ + β,  with μ, σ² (biased) the row's mean and variance in float32.
/// Gradients: dβ = Σ_rows dy,  dγ = Σ_rows dy x̂  (float32 sums over the leading axes),
///   dx = (1/√(σ² + ε)) (g - mean(g) - x̂ mean(g x̂))  with g = γ dy, per row.
/// shape_error for a scalar x or gamma/beta not of shape (d,); dtype_error unless all three dtypes agree.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon = 1e-5f);

/// Embedding lookup: out[i, :] = table[ids[i], :] for table (vocab, dim); the result has shape
/// ids_shape + (dim) and holds exact copies of the rows (table's dtype).
/// Gradient: dtable[v, :] = Σ_{i : ids[i] = v} dy[i, :], accumulated in float32 (repeated ids add up),
/// rounded once to table's dtype; rows never looked up get 0.
/// shape_error unless table has rank 2 and ids.size() == ids_shape.elements(); std::invalid_argument
/// naming the position and the value of an id outside [0, vocab).
Tensor embedding(const Tensor& table, std::span<const std::int32_t> ids, const Shape& ids_shape);

/// Inverted dropout: y = x · m / (1 - rate) with m ~ Bernoulli(1 - rate) per element, drawn from `rng`
/// (one rng.uniform() per element, in row-major order: m = [u ≥ rate]), so the same seed gives the same mask.
/// dy/dx = m / (1 - rate), with the same mask. Dropped elements are multiplied by 0, as in PyTorch and
/// Keras, so an inf or NaN there still gives NaN (an overflow stays visible to the loss scaler).
/// Returns x itself (nothing recorded, nothing drawn) when !training or rate == 0.
/// std::invalid_argument unless 0 ≤ rate < 1.
Tensor dropout(const Tensor& x, float rate, Rng& rng, bool training = true);

} // namespace mixprec::autodiff
