#pragma once
/// Layers that turn inputs into token vectors: Embedding looks up ids in a learned table (Keras's
/// Embedding), Patches cuts images into tokens, PositionEmbedding adds a learned vector per position.

#include <mixprec/models/layers/layer.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace mixprec::models {

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

/// Cuts each image (C, H, W) into non-overlapping p×p patches and lays each out as a token:
/// (C, H, W) -> ((H/p)·(W/p), C·p·p). Patches are numbered row-major (left to right, then top to bottom),
/// and the values within a token are ordered channel, patch row, patch column. Pure data movement: values
/// and gradients are copied exactly. No variables.
class Patches final : public Layer {
  public:
    /// std::invalid_argument when patch is 0.
    explicit Patches(std::size_t patch);

    std::string kind() const override { return "Patches"; }
    std::string config() const override;
    std::size_t patch() const { return patch_; }

  protected:
    /// shape_error naming the layer, the shape and the patch size unless the example has rank 3 with H and
    /// W non-zero multiples of the patch size (and C ≥ 1).
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    Tensor forward(const Tensor& x, const CallContext& context) override;

  private:
    std::size_t patch_;
};

/// Adds a learned (T, D) table to every example (T, D): y[b, t, :] = x[b, t, :] + E[t, :]. E starts
/// uniform in [-0.05, 0.05) (Keras's Embedding default) and is the variable "<name>/embeddings". The
/// gradient of E is summed over the batch in float32 before its one rounding.
class PositionEmbedding final : public Layer {
  public:
    PositionEmbedding() = default;

    std::string kind() const override { return "PositionEmbedding"; }
    /// {embeddings}; empty before build.
    std::vector<Variable> variables() const override;

  protected:
    /// shape_error naming the layer and the shape unless the example has shape (T, D), both ≥ 1.
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    Tensor forward(const Tensor& x, const CallContext& context) override;

  private:
    std::vector<Variable> table_;
};

} // namespace mixprec::models
