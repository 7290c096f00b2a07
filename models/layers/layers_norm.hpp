#pragma once
/// Layer normalization and embedding lookup, as Keras's LayerNormalization and Embedding.

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

/// Looks up a row of a (vocab, dim) table for each id: examples of ids of any shape S give outputs of
/// shape S + (dim), in the compute dtype. The input is a tensor of any floating dtype whose values are
/// the ids (exact small integers); it is read as is, never cast to the compute dtype (float16 would
/// round ids above 2048). Only the table gets a gradient. The table starts uniform in [-0.05, 0.05), as
/// Keras's. Variable "<name>/embeddings".
class Embedding final : public Layer {
  public:
    /// std::invalid_argument when vocab or dim is 0, or vocab exceeds 2^24 (ids must be exact in float32).
    Embedding(std::size_t vocab, std::size_t dim);
    std::string kind() const override { return "Embedding"; }
    std::string config() const override;
    /// {embeddings}; empty before build.
    std::vector<Variable> variables() const override;
    std::size_t vocab() const { return vocab_; }
    std::size_t dim() const { return dim_; }

  protected:
    /// shape_error when the example leaves no room for the batch and embedding axes (rank > 6).
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    /// std::invalid_argument naming the (flat) position in the batch and the value of the first id that is
    /// not an integer in [0, vocab).
    Tensor forward(const Tensor& x, const CallContext& context) override;
    bool keeps_input_dtype() const override { return true; }

  private:
    std::size_t vocab_;
    std::size_t dim_;
    std::optional<Variable> table_;
};

} // namespace mixprec::models
