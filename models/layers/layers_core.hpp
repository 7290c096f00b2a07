#pragma once
/// The core layers, as Keras's: Dense, Flatten, Activation, Rescaling and Dropout, and the activation functions
/// that Dense and Conv2D apply by name.
///
/// Activation names: "" or "linear" (identity), "relu", "gelu", "tanh", "sigmoid", "softmax". "gelu" is the
/// tanh approximation (Keras's gelu with approximate=True; Keras defaults to the erf form). "softmax" is
/// autodiff::softmax over the last axis, as Keras's: a Dense output's units (so Dense(10, "softmax") gives
/// probabilities, to pair with a loss on probabilities rather than logits), but for a Conv2D's
/// (filters, H, W) output the width W, not the filters.

#include <mixprec/models/layers/fp8_choice.hpp>
#include <mixprec/models/layers/layer.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace mixprec::models {

/// std::invalid_argument naming `name` and listing the valid names unless it is an activation name.
void check_activation(std::string_view name);

/// x through the named activation (recorded on the tape like any op); x itself for "" and "linear".
/// std::invalid_argument for an unknown name, as check_activation.
Tensor apply_activation(const Tensor& x, std::string_view name);

/// How messages name a layer: "layer 'dense' (Dense)", or "Dense layer" when it has no name yet.
std::string describe_layer(const Layer& layer);

/// For do_build implementations: throws shape_error "layer 'dense' (Dense) needs examples of shape
/// <expected>, got <got>" ("Dense layer needs ..." for an unnamed layer).
[[noreturn]] void throw_input_shape_error(const Layer& layer, const Shape& got, std::string_view expected);

/// Densely connected layer: y = activation(x W + b) on the last axis, for examples of shape (..., in)
/// (rank ≥ 1; the leading axes are kept, as Keras's Dense does). W (in, units) starts glorot_uniform
/// (fan_in = in, fan_out = units) and b (units) at zeros. Variables "<name>/kernel", "<name>/bias".
/// Under a policy with FP8 products, where fp8() (fp8_choice.hpp), it multiplies in FP8: under
/// mixed_float8 with per-tensor scales (autodiff::dense_fp8) when a training step gives it scales, under
/// mixed_mxfp8 in MX blocks (autodiff::dense_mxfp8) always.
class Dense final : public Layer, public Fp8Choice {
  public:
    /// std::invalid_argument when units is 0 or the activation is unknown.
    explicit Dense(std::size_t units, std::string activation = "", bool use_bias = true);

    std::string kind() const override { return "Dense"; }
    std::string config() const override;
    /// {kernel, bias} (kernel alone without a bias); empty before build.
    std::vector<Variable> variables() const override;

    std::size_t units() const { return units_; }
    const std::string& activation() const { return activation_; }
    bool use_bias() const { return use_bias_; }

  protected:
    /// shape_error for an example of rank 0 (Dense needs (..., in)).
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    Tensor forward(const Tensor& x, const CallContext& context) override;

  private:
    std::size_t units_;
    std::string activation_;
    bool use_bias_;
    std::optional<Variable> kernel_;
    std::optional<Variable> bias_;
};

/// Flattens each example to one axis: (d₁, …, dₖ) → (d₁ ⋯ dₖ); a rank-0 example becomes (1), as in Keras.
/// The values are not copied (a reshape), and gradients flow through unchanged.
class Flatten final : public Layer {
  public:
    Flatten() = default;
    std::string kind() const override { return "Flatten"; }

  protected:
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    Tensor forward(const Tensor& x, const CallContext& context) override;
};

/// Applies a named activation elementwise; examples of any shape, output shape = input shape.
class Activation final : public Layer {
  public:
    /// std::invalid_argument for an unknown name (see check_activation).
    explicit Activation(std::string activation);
    std::string kind() const override { return "Activation"; }
    std::string config() const override;
    const std::string& activation() const { return activation_; }

  protected:
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    Tensor forward(const Tensor& x, const CallContext& context) override;

  private:
    std::string activation_;
};

/// x · scale + offset, elementwise, in x's dtype (as Keras's Rescaling, which casts both to the compute
/// dtype); output shape = input shape, no variables. The gradient is scaled by `scale`. With a power of two
/// and no offset, scaling in float16 is exact while the result stays in the normal range: multiplying by
/// 2^k moves every value k binades (and its gradient the same k binades) and changes no digit.
class Rescaling final : public Layer {
  public:
    /// std::invalid_argument unless scale and offset are finite.
    explicit Rescaling(float scale, float offset = 0.0f);
    std::string kind() const override { return "Rescaling"; }
    std::string config() const override;
    float scale() const { return scale_; }
    float offset() const { return offset_; }

  protected:
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    Tensor forward(const Tensor& x, const CallContext& context) override;

  private:
    float scale_;
    float offset_;
};

/// Inverted dropout (autodiff::dropout): when called with context.training, each element is zeroed with
/// probability `rate` and the others scaled by 1/(1 - rate), the mask drawn from *context.dropout_rng;
/// otherwise (inference) the input is returned unchanged and nothing is drawn.
class Dropout final : public Layer {
  public:
    /// std::invalid_argument unless 0 ≤ rate < 1.
    explicit Dropout(float rate);
    std::string kind() const override { return "Dropout"; }
    std::string config() const override;
    float rate() const { return rate_; }

  protected:
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    /// std::logic_error naming the layer when training with a rate > 0 and no context.dropout_rng.
    Tensor forward(const Tensor& x, const CallContext& context) override;

  private:
    float rate_;
};

} // namespace mixprec::models
