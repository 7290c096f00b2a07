#pragma once
/// The float32 core of multi-head self-attention, fused: each head's queries, keys and values are read
/// where a packed q/k/v projection put them, and its result written where the output projection reads it,
/// without the copies that splitting the heads apart and joining them again would make.
///
///   qkv (B, T, 3·H·K): row t of example b holds the queries of heads 0..H−1 (K values each), then
///                      their keys, then their values
///   context (B, T, H·K): row t holds softmax(q kᵀ · scale) v of each head, head h at columns h·K
///
/// The products run on OpenBLAS's sgemm, one head of one example at a time on one thread, with the
/// transpositions matmul's backward uses (ops_matmul.cpp); softmax in float32 (detail/softmax_lane.hpp).
/// The scale multiplies the float32 sums of q·k. Each head is computed alone, so the bits do not depend on
/// how the heads are spread over the threads.

#include <cstddef>

namespace mixprec::autodiff::kernels {

struct AttentionShape {
    std::size_t batch, tokens, heads, key_dim;
    float scale;
};

/// context and the attention weights (B, H, T, T: softmax of the scaled scores, kept for the backward).
void attention_forward(const float* qkv, const AttentionShape& s, float* context, float* weights);

/// dqkv (B, T, 3·H·K) from dcontext (B, T, H·K), with qkv and the weights of the forward pass.
void attention_backward(const float* qkv, const float* weights, const float* dcontext, const AttentionShape& s,
                        float* dqkv);

} // namespace mixprec::autodiff::kernels
