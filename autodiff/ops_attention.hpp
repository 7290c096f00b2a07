#pragma once
/// Scaled dot-product self-attention over heads packed side by side, with its gradient:
///
///   qkv (B, T, 3·H·K) -> (B, T, H·K)
///
/// Row t of example b of qkv holds the queries of heads 0..H−1 (K values each), then their keys, then their
/// values; the result holds, for each head h at columns h·K, softmax(q kᵀ / √K) v, the softmax along the
/// keys. This is the core of a multi-head attention layer between its two projections.
///
/// float32, when float32 products run on OpenBLAS (kernels_matmul.hpp), computes it fused
/// (kernels_attention.hpp): the same products and softmax, without copying the heads apart and together.
/// Other dtypes, and the other GEMM libraries, compose it from the ops: the heads split with reshape,
/// transpose and slice, q scaled by 1/√K and rounded to the dtype, batched matmul, softmax, matmul, each
/// rounding once to the dtype. Where 1/√K is a power of 2, the fused route gives the bits of that
/// composition in float32 on OpenBLAS (tests/test_ops_attention.cpp holds it).

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstddef>

namespace mixprec::autodiff {

/// shape_error unless qkv has rank 3 and a last axis of 3 · heads · key_dim; invalid_argument for 0 heads
/// or a key_dim of 0.
Tensor self_attention(const Tensor& qkv, std::size_t heads, std::size_t key_dim);

/// The same attention composed from the ops in qkv's dtype, as self_attention runs it where it does not
/// fuse (for tests and benchmarks to hold the fused route against); the same errors.
Tensor self_attention_from_ops(const Tensor& qkv, std::size_t heads, std::size_t key_dim);

} // namespace mixprec::autodiff
