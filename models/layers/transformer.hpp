#pragma once
/// The pre-norm transformer encoder block of a vision transformer (Dosovitskiy et al., 2021). With the
/// layers of embedding.hpp and pooling.hpp it makes the built-in vit:
///
///   Patches(7)                (1, 28, 28) -> (16, 49)        embedding.hpp
///   PositionEmbedding()       (16, 64)    -> (16, 64)        embedding.hpp, after a Dense(64) projection
///   TransformerBlock(4, 128)  (16, 64)    -> (16, 64)
///   GlobalAveragePooling1D()  (16, 64)    -> (64)            pooling.hpp
///
/// All shapes are per example (the batch axis comes first in calls). Each layer computes in its policy's
/// compute dtype with the precision of the autodiff ops it uses (float32 arithmetic, one rounding per op).
/// Under FP8 products a block's fp8() (fp8_choice.hpp) decides for its four projections: the attention's
/// qkv and output and the MLP's "<name>/mlp1" and "<name>/mlp2" (attention.hpp says what stays wider).

#include <mixprec/models/layers/attention.hpp>
#include <mixprec/models/layers/fp8_choice.hpp>
#include <mixprec/models/layers/layer.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace mixprec::models {

/// One pre-norm transformer encoder block on examples (T, D):
///   x ← x + Dropout(MultiHeadSelfAttention(LayerNorm₁(x)))
///   x ← x + Dropout(Dense(D)(gelu(Dense(mlp_width)(LayerNorm₂(x)))))
/// with `heads` heads of width D / heads, gelu in its tanh form, and dropout (inverted, drawn from
/// context.dropout_rng) active only when training with a rate > 0. The layer norms use epsilon (1e-6 by
/// default, as the original ViT) and compute their statistics in float32.
///
/// Variables, in this order: "<name>/norm1/gamma", "norm1/beta", then the attention's
/// "<name>/attention/qkv/kernel", "…/qkv/bias", "…/output/kernel", "…/output/bias", then "<name>/norm2/gamma",
/// "norm2/beta", "mlp1/kernel" (D, mlp_width), "mlp1/bias", "mlp2/kernel" (mlp_width, D), "mlp2/bias".
/// Kernels start Glorot-uniform, biases and betas at zero, gammas at one.
class TransformerBlock final : public Layer, public Fp8Choice {
  public:
    /// std::invalid_argument when heads or mlp_width is 0, dropout is outside [0, 1), or epsilon is not
    /// finite and > 0.
    TransformerBlock(std::size_t heads, std::size_t mlp_width, float dropout = 0.0f, float epsilon = 1e-6f);

    std::string kind() const override { return "TransformerBlock"; }
    std::string config() const override;
    std::vector<Variable> variables() const override;

    std::size_t heads() const { return attention_.heads(); }
    std::size_t mlp_width() const { return mlp_width_; }
    float dropout() const { return dropout_; }
    float epsilon() const { return epsilon_; }

  protected:
    /// shape_error naming the layer and the shape unless the example has shape (T, D), both ≥ 1, with D a
    /// multiple of the number of heads.
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    /// std::logic_error naming the layer when training with a dropout rate > 0 and no context.dropout_rng.
    Tensor forward(const Tensor& x, const CallContext& context) override;

  private:
    Tensor drop(const Tensor& x, const CallContext& context) const;

    MultiHeadSelfAttention attention_;
    std::size_t mlp_width_;
    float dropout_;
    float epsilon_;
    std::vector<Variable> norm1_; // gamma, beta
    std::vector<Variable> rest_;  // norm2 gamma, beta; mlp1 kernel, bias; mlp2 kernel, bias
};

} // namespace mixprec::models
