#pragma once
/// Products in FP8 with per-tensor scales: the three GEMMs of a dense layer (Transformer Engine's Linear,
/// torchao's Float8Linear), on operands cast by kernels::quantize.

#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace mixprec::autodiff {

/// How one operand of an FP8 product is cast: into `format`, multiplied by the scale `scale(amax)`
/// returns for the operand's amax (kernels::amax). A delayed recipe returns the scale it chose from
/// earlier steps and keeps this amax for its history; a current recipe computes the scale from it.
/// The scale must be positive and finite. A cast saturates (the recipes with per-tensor scales), or turns
/// an overflow into infinity, so that a loss scale sees it and skips the step (gradients a loss scale
/// places, with scale 1). With a `stochastic` key it rounds stochastically (stochastic_rounding.hpp),
/// drawing from that key's stream; to nearest even without one. `observe`, when set, is called after the
/// cast with what its rounding did to x · s (rounding.hpp: how many values saturated, underflowed, ...),
/// counted by the kernel as it rounds.
struct Fp8Cast {
    Dtype format = Dtype::float8_e4m3;
    std::function<float(float amax)> scale;
    Overflow overflow = Overflow::saturate;
    std::optional<std::uint64_t> stochastic{};
    std::function<void(const RoundingStats&)> observe{};
};

/// The casts of a dense layer's three FP8 tensors: its input and kernel (forward), and the gradient
/// flowing back into its output (backward). The "hybrid" recipe: e4m3 forward, e5m2 backward.
struct Fp8DenseCasts {
    Fp8Cast input{Dtype::float8_e4m3, {}};
    Fp8Cast kernel{Dtype::float8_e4m3, {}};
    Fp8Cast output_grad{Dtype::float8_e5m2, {}};
};

/// Where FP8 layers get their casts during training: the per-tensor scaling state of a model
/// (amp::Fp8Scaling implements it, with Transformer Engine's recipes).
class Fp8Scales {
  public:
    virtual ~Fp8Scales() = default;
    /// The casts of the dense layer `layer`'s input, kernel and output gradient for this step.
    virtual Fp8DenseCasts dense_casts(const std::string& layer) = 0;
};

/// A dense layer's product in FP8, for x (batch, in) or (batch, seq, in), w (in, out) and an optional
/// bias (out,) in x's dtype:
///
///   q_x = fp8(x s_x), q_w = fp8(w s_w):  y  = (q_x q_w) / (s_x s_w) + bias   in x's dtype
///   q_g = fp8(dy s_g):                   dx = (q_g q_wᵀ) / (s_g s_w)          in x's dtype
///                                        dw = (q_xᵀ q_g) / (s_x s_g)          in w's dtype
///                                        dbias = Σ dy                         (from dy, not q_g)
///
/// Products of FP8 values are exact in float32; they are summed in float32, the sum is multiplied by
/// (1/s_a)(1/s_b) in float32 (MatmulOptions::alpha), and each result is rounded once. The backward
/// pass reuses q_x and q_w (the tape keeps those, not x and w). Gradients pass straight through the
/// casts: each rounding is treated as the identity, as in every FP8 training recipe.
Tensor dense_fp8(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Fp8DenseCasts& casts);

} // namespace mixprec::autodiff
