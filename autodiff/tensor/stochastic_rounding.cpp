#include <mixprec/autodiff/tensor/stochastic_rounding.hpp>

#include <mixprec/autodiff/tensor/detail/rounding_tally.hpp>
#include <mixprec/autodiff/tensor/format.hpp>
#include <mixprec/autodiff/tensor/rng.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <stdexcept>
#include <string>

namespace mixprec::autodiff {
namespace {

constexpr std::uint32_t magnitude_mask = 0x7FFFFFFFu, infinity_bits = 0x7F800000u;

/// Rounds src[0, n) stochastically into format S's values, written as float32 to out (each exactly
/// representable in S, or ±infinity / ± the largest finite where it overflowed), and with Count, counts
/// what happened. Both ways of forming the result are computed and one is selected, without branches:
/// which applies to a value is as random as the values are.
template <class S, bool Count>
void round_block(const float* src, float* out, std::size_t n, std::uint64_t key, std::uint64_t first, Overflow overflow,
                 detail::tally_counts& counts) {
    constexpr int m = S::man_bits;
    constexpr int emin = 1 - S::bias; // exponent of the smallest normal
    constexpr std::uint32_t max_bits = std::bit_cast<std::uint32_t>(decode<S>(S::max_code));
    constexpr std::uint32_t normal_min_bits = std::uint32_t(emin + 127) << 23;
    constexpr std::uint32_t lower = std::uint32_t(m - emin) << 23; // from k to k · 2^(emin - m)
    const std::uint32_t overflow_bits = overflow == Overflow::saturate ? max_bits : infinity_bits;
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t bits = std::bit_cast<std::uint32_t>(src[i]);
        const std::uint32_t a = bits & magnitude_mask, sign = bits ^ a;
        const bool special = a - 1 >= infinity_bits - 1; // zero, infinity or NaN: narrow() converts them
        const std::uint32_t biased = a >> 23;
        const int e = int(std::max(biased, 1u)) - 127; // float32 subnormals: on the 2^-126 scale
        const int below = std::max(emin - e, 0);       // how far below S's normal range
        const int s = std::min(23 - m + below, 56);    // significand bits S cannot keep (all, from 24)
        const std::uint64_t significand = (a & 0x7FFFFFu) | (biased != 0 ? 0x800000u : 0u);
        const std::uint64_t rem = significand & ((std::uint64_t{1} << s) - 1);
        const std::uint64_t threshold = s <= 32 ? rem << (32 - s) : rem >> (s - 32); // ⌊frac · 2^32⌋
        const std::uint32_t up = (counter_bits(key, first + i) >> 32) < threshold;
        // In S's normal range, clear the dropped bits and add one step (a carry moves into the exponent);
        // below it, k steps of the subnormal spacing 2^(emin - m): k converted exactly, its exponent lowered.
        const std::uint32_t normal = (a & ~((1u << (s & 31)) - 1)) + (up << (s & 31));
        const auto k = std::uint32_t(significand >> s) + up;
        const std::uint32_t subnormal = k == 0 ? 0u : std::bit_cast<std::uint32_t>(float(k)) - lower;
        std::uint32_t r = special ? a : below == 0 ? normal : subnormal;
        const bool over = !special && r > max_bits;
        r = over ? overflow_bits : r;
        out[i] = std::bit_cast<float>(sign | r);
        if constexpr (Count) {
            counts.zeros += a == 0;
            counts.nonfinite += special && a != 0;
            counts.amax_bits = std::max(counts.amax_bits, special ? 0u : a);
            counts.overflow += over;
            counts.underflow += !special && r == 0;
            counts.subnormal += !special && r != 0 && r < normal_min_bits;
        }
    }
}

template <class S>
void narrow_as(const float* src, void* dst, std::size_t n, Dtype to, std::uint64_t key, std::uint64_t first,
               Overflow overflow) {
    RoundingRecorder* recorder = active_rounding_recorder();
    const bool recording = recorder != nullptr;
    auto* bytes = static_cast<std::byte*>(dst);
    const std::size_t width = size_of(to);
    const auto block = [&](std::size_t at, std::size_t count, const detail::tally_bounds&,
                           detail::tally_counts& counts) {
        std::array<float, detail::tally_block> rounded;
        if (recording)
            round_block<S, true>(src + at, rounded.data(), count, key, first + at, overflow, counts);
        else
            round_block<S, false>(src + at, rounded.data(), count, key, first + at, overflow, counts);
        detail::narrow_unrecorded(rounded.data(), bytes + at * width, count, to, overflow);
    };
    if (!recording) {
        detail::tally_counts ignored;
        for (std::size_t at = 0; at < n; at += detail::tally_block)
            block(at, std::min(detail::tally_block, n - at), detail::tally_bounds_for(to), ignored);
        return;
    }
    recorder->record(dst, n * width, detail::tallied(src, n, to, recorder->histogram(), block));
}

} // namespace

void narrow_stochastic(const float* src, void* dst, std::size_t n, Dtype to, std::uint64_t key, std::uint64_t first,
                       Overflow overflow) {
    if (n != 0 && (src == nullptr || dst == nullptr))
        throw std::invalid_argument("narrow_stochastic: null buffer for " + std::to_string(n) + " elements");
    switch (to) {
    case Dtype::float16:
        return narrow_as<float16::spec>(src, dst, n, to, key, first, overflow);
    case Dtype::bfloat16:
        return narrow_as<bfloat16::spec>(src, dst, n, to, key, first, overflow);
    case Dtype::cbfloat16:
        return narrow_as<cbfloat16::spec>(src, dst, n, to, key, first, overflow);
    case Dtype::float8_e4m3:
        return narrow_as<float8_e4m3::spec>(src, dst, n, to, key, first, overflow);
    case Dtype::float8_e5m2:
        return narrow_as<float8_e5m2::spec>(src, dst, n, to, key, first, overflow);
    case Dtype::float32:
        break;
    }
    throw std::invalid_argument("narrow_stochastic: float32 is not a narrower format (round into float16, bfloat16, "
                                "cbfloat16 or an FP8 format)");
}

} // namespace mixprec::autodiff
