#pragma once
/// MultiHeadSelfAttention: scaled dot-product self-attention over a sequence, split into heads, as in
/// "Attention Is All You Need" (Vaswani et al., 2017) and Keras's MultiHeadAttention called with the same
/// tensor as query, key and value.
///
/// On examples (T, D), with H heads of width K (K = D / H unless given) and the batch axis first:
///   [q k v] = x W_qkv + b_qkv                      W_qkv (D, 3HK), b_qkv (3HK): one fused product
///   per head h:  A_h = softmax(q_h k_hᵀ / √K) v_h   softmax over the keys (the last axis)
///   y = [A_1 … A_H] W_o + b_o                       W_o (HK, D), b_o (D): back to width D
/// Columns [0, HK) of the fused product are the queries, [HK, 2HK) the keys, [2HK, 3HK) the values, and
/// within each block head h owns columns [hK, (h + 1)K).
///
/// Precision. Every product computes in float32 and rounds once to the compute dtype, and softmax keeps
/// its statistics (max, Σ exp) in float32. The queries are multiplied by 1/√K before the product q kᵀ
/// (an exact power of two when K is a power of four, such as 16), so the scores are already scaled when
/// they are rounded. In float16 a score whose magnitude exceeds 65504 still rounds to ±inf; softmax
/// subtracts the row's maximum, and inf - inf is NaN, so one +inf score turns its whole row, and from
/// there the output and the loss, into NaN. Loss scaling cannot repair that: it guards the backward
/// pass, not the forward one; the step is skipped and the scale backed off, to no avail, as long as the
/// activations stay that large. Normalizing the input (the pre-norm transformer block does) keeps q and k
/// small; bfloat16 has float32's range and never overflows here. In the backward pass the gradients of
/// the scores carry the loss scale like every other gradient: an overflow there is an ordinary inf
/// gradient, which the LossScaleOptimizer detects and answers by skipping the step and backing off.
///
/// FP8. Under a policy with FP8 products, where fp8() (fp8_choice.hpp), the two projections (qkv, output)
/// multiply in FP8 as a Dense does: per-tensor scales under mixed_float8 (casts named "<name>/qkv/input",
/// …, "<name>/output/output_grad"), MX blocks under mixed_mxfp8. The attention products q kᵀ and A v
/// and the softmax stay in the compute dtype, as in Transformer Engine's FP8 recipes.

#include <mixprec/models/layers/fp8_choice.hpp>
#include <mixprec/models/layers/layer.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace mixprec::models {

class MultiHeadSelfAttention : public Layer, public Fp8Choice {
  public:
    /// `heads` ≥ 1 heads of width `key_dim` each; key_dim = 0 means D / heads, fixed at build.
    /// std::invalid_argument when heads is 0.
    explicit MultiHeadSelfAttention(std::size_t heads, std::size_t key_dim = 0);

    std::string kind() const override { return "MultiHeadSelfAttention"; }
    std::string config() const override;

    std::size_t heads() const { return heads_; }
    /// The width of each head: the one given, or D / heads once built (0 before that when not given).
    std::size_t key_dim() const { return key_dim_; }

    /// qkv/kernel (D, 3HK), qkv/bias (3HK), output/kernel (HK, D), output/bias (D), in that order.
    std::vector<Variable> variables() const override;

  protected:
    /// Accepts examples (T, D) with T, D ≥ 1 and returns (T, D). Kernels are Glorot-uniform (the fused
    /// one with the fans of a single projection, D in and HK out), biases zero. shape_error naming the
    /// layer and the shape for another rank or an empty axis, or when key_dim was not given and D is not
    /// a multiple of the number of heads.
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    /// The computation above on a batch (B, T, D), in the compute dtype.
    Tensor forward(const Tensor& x, const CallContext& context) override;

  private:
    std::size_t heads_;
    std::size_t key_dim_;
    std::vector<Variable> variables_;
};

} // namespace mixprec::models
