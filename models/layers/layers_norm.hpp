#pragma once
/// Layer normalization, as Keras's LayerNormalization.

#include <mixprec/models/layers/layer.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace mixprec::models {

/// Normalizes each example over its last axis (autodiff::layer_norm): y = γ (x − μ)/√(σ² + ε) + β, with
/// γ starting at ones and β at zeros, both of shape (d) for examples (..., d). The statistics are taken
/// in float32 whatever the compute dtype. epsilon defaults to Keras's 1e-3 (PyTorch uses 1e-5).
/// Variables "<name>/gamma", "<name>/beta".
class LayerNorm final : public Layer {
  public:
    /// std::invalid_argument unless epsilon is finite and > 0.
    explicit LayerNorm(float epsilon = 1e-3f);
    std::string kind() const override { return "LayerNormalization"; }
    std::string config() const override;
    /// {gamma, beta}; empty before build.
    std::vector<Variable> variables() const override;
    float epsilon() const { return epsilon_; }

  protected:
    /// shape_error for a rank-0 example or a last axis of 0.
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    Tensor forward(const Tensor& x, const CallContext& context) override;

  private:
    float epsilon_;
    std::optional<Variable> gamma_;
    std::optional<Variable> beta_;
};

} // namespace mixprec::models
