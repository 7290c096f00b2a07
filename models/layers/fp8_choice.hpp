#pragma once
/// Which layers with products (Dense, Conv2D, MultiHeadSelfAttention, TransformerBlock) run them in 8 bits
/// under a policy that has FP8 products (amp/policy.hpp: mixed_float8, mixed_mxfp8).

#include <optional>

namespace mixprec::models {

/// A layer's choice of FP8 products. Unset, a layer takes them, except the first and the last layer with
/// products among a model's layers (in a Sequential, the first and last added; Model::build marks them
/// with set_edge), which stay in the compute dtype, as Transformer Engine's and Intel's FP8 recipes keep
/// the first and last layers in higher precision. set_fp8 decides for one layer either way.
class Fp8Choice {
  public:
    void set_fp8(std::optional<bool> fp8) { fp8_ = fp8; }
    bool fp8() const { return fp8_.value_or(!edge_); }
    void set_edge(bool edge) { edge_ = edge; }

  protected:
    ~Fp8Choice() = default;

  private:
    std::optional<bool> fp8_;
    bool edge_ = false;
};

} // namespace mixprec::models
