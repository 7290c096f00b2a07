#pragma once
// Internal: the pieces of rounding telemetry (rounding.hpp) shared by convert.cpp and rounding.cpp. The
// counting loop itself is tally_loop in convert_kernels.hpp, compiled by each instruction-set path.

#include <cstddef>
#include <cstdint>
#include <functional>

namespace mixprec::autodiff {
enum class Dtype : std::uint8_t;
struct RoundingStats;
} // namespace mixprec::autodiff

namespace mixprec::autodiff::detail {

/// RoundingThresholds as bit patterns of non-negative float32 values.
struct tally_bounds {
    std::uint32_t underflow_max;
    std::uint32_t normal_min;
    std::uint32_t overflow_min;
};

/// Running counts of one rounding. amax_bits is the bit pattern of the largest finite magnitude.
struct tally_counts {
    std::uint64_t zeros = 0, underflow = 0, subnormal = 0, overflow = 0, nonfinite = 0;
    std::uint32_t amax_bits = 0;
};

using tally_fn = void (*)(const float* src, std::size_t n, const tally_bounds& bounds, tally_counts& counts);

/// Values per call of a tally loop: narrow() rounds a block of this many, then counts it while it is in L1.
inline constexpr std::size_t tally_block = 2048;

/// The thresholds of rounding into `format` (rounding.cpp).
const tally_bounds& tally_bounds_for(Dtype format);
/// The tally loop of the instruction-set level in use (convert.cpp).
tally_fn tally_function();
/// The stats of rounding src[0, n) into `format`, counted block by block with `tally`; before counting a
/// block, round_block(offset, count) (if set) rounds it, so that it is counted while in cache.
RoundingStats tallied(const float* src, std::size_t n, Dtype format, tally_fn tally, bool histogram,
                      const std::function<void(std::size_t, std::size_t)>& round_block);

} // namespace mixprec::autodiff::detail
