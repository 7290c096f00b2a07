#pragma once
/// Scaled casts into FP8, as the per-tensor scaling recipes of FP8 training do them (Transformer Engine's
/// DelayedScaling and Float8CurrentScaling, torchao's tensorwise float8):
///
///   q = fp8(x · s),   x ≈ q / s
///
/// where s is the tensor's scale, chosen from its amax (the largest finite |x|) so that x · s fills the
/// format's range. A product of two such tensors is (q_a q_b) / (s_a s_b): the FP8 values are multiplied
/// exactly, summed in float32 and the sum multiplied by 1 / (s_a s_b) (MatmulOptions::alpha).

#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <optional>

namespace mixprec::autodiff::kernels {

/// The largest finite magnitude of x's values; 0 when x has none (empty, all zero, or only inf and NaN).
float amax(const Tensor& x);

/// x · scale in `format`: each value multiplied by `scale` in float32 (one rounding, as the scaled cast of
/// the hardware), then rounded to nearest even into `format`. Saturating by default: a magnitude beyond
/// the format's largest finite, and ±infinity, become ± the largest finite (as CUDA's __NV_SATFINITE
/// casts do); with Overflow::infinity they become ±infinity (NaN in e4m3), so that a loss scale sees the
/// overflow. NaN stays NaN. With a `stochastic` key the product is rounded stochastically instead
/// (stochastic_rounding.hpp), element i drawing value i of that key's stream. `format` may be any dtype
/// narrower than float32; std::invalid_argument for a scale that is not positive and finite.
Tensor quantize(const Tensor& x, float scale, Dtype format, Overflow overflow = Overflow::saturate,
                std::optional<std::uint64_t> stochastic = std::nullopt);

} // namespace mixprec::autodiff::kernels
