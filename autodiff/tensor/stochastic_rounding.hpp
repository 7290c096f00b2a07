#pragma once
/// Stochastic rounding into the narrow formats: a value between two neighbours of the format goes to
/// either, with probabilities that make the rounding unbiased on average. Gradients too small for a
/// format's spacing then survive in expectation instead of always rounding the same way (Gupta et al.
/// 2015, and the e5m2 gradients of Mellempudi et al. 2019).
///
/// For a finite x, let lo be x rounded toward zero into the format, hi the next magnitude away from
/// zero (lo's magnitude plus one step of the format's spacing there, which may lie beyond the largest
/// finite), and frac = (|x| − |lo|) / (|hi| − |lo|). Element i of the stream draws u_i, the high 32 bits
/// of counter_bits(key, first + i) (rng.hpp), and
///
///   x rounds to hi  if u_i < ⌊frac · 2^32⌋,  otherwise to lo,
///
/// so hi is taken with probability ⌊frac · 2^32⌋ / 2^32. That is frac exactly wherever |x| is at least
/// the format's smallest normal (frac has at most 23 bits there); below it, frac's bits beyond 2^-32 are
/// dropped, so a magnitude under 2^-32 of the smallest subnormal always rounds to zero. Values the format
/// holds exactly (frac = 0) are kept. hi beyond the largest finite is an overflow: ±infinity (NaN for
/// float8_e4m3) or, with Overflow::saturate, ± the largest finite. Zeros keep their sign; infinities and
/// NaN convert as narrow() converts them.
///
/// The result depends only on the values, the key and the element's position: not on the thread count,
/// the instruction-set level or the floating-point environment (the arithmetic is on integers). A
/// RoundingRecorder counts these roundings by their outcomes: an underflow is a nonzero value that
/// rounded to zero, a subnormal one that rounded to a nonzero subnormal, an overflow one that rounded
/// beyond the largest finite.

#include <mixprec/autodiff/tensor/convert.hpp>

#include <cstddef>
#include <cstdint>

namespace mixprec::autodiff {

/// dst[i] = src[i] rounded stochastically into `to` (see above) with the random values of the stream
/// `key` from position `first` on. `dst` holds n elements of `to`. std::invalid_argument for float32.
void narrow_stochastic(const float* src, void* dst, std::size_t n, Dtype to, std::uint64_t key, std::uint64_t first,
                       Overflow overflow = Overflow::infinity);

} // namespace mixprec::autodiff
