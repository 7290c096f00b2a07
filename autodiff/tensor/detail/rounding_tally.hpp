#pragma once
// Internal: the pieces of rounding telemetry (rounding.hpp) shared by convert.cpp and rounding.cpp. The
// counting loop itself is tally_loop in convert_kernels.hpp, compiled by each instruction-set path.

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace mixprec::autodiff {
enum class Dtype : std::uint8_t;
enum class Overflow : unsigned char;
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
/// Counts one block: block(offset, count, bounds, counts) adds the stats of src[offset, offset + count).
/// A reference to the caller's callable, which must outlive it (a lambda passed to tallied() does): unlike
/// std::function it never allocates, and narrow() makes one per call.
class tally_block_fn {
  public:
    template <class F>
    requires(!std::is_same_v<F, tally_block_fn> &&
             std::is_invocable_v<const F&, std::size_t, std::size_t, const tally_bounds&, tally_counts&>)
        tally_block_fn(const F& f) // implicit: callers pass a lambda
        : object_(&f),
          call_([](const void* object, std::size_t at, std::size_t m, const tally_bounds& b, tally_counts& c) {
              (*static_cast<const F*>(object))(at, m, b, c);
          }) {}
    void operator()(std::size_t at, std::size_t m, const tally_bounds& b, tally_counts& c) const {
        call_(object_, at, m, b, c);
    }

  private:
    const void* object_;
    void (*call_)(const void*, std::size_t, std::size_t, const tally_bounds&, tally_counts&);
};
/// The stats of rounding src[0, n) into `format`, counted block by block (so that a block is counted
/// while in cache, right after it is rounded), with the exponent histogram if asked.
RoundingStats tallied(const float* src, std::size_t n, Dtype format, bool histogram, const tally_block_fn& block);
/// narrow() without recording: for a rounding that records what it did itself (stochastic_rounding.cpp
/// narrows values it has already rounded, and counts by their originals).
void narrow_unrecorded(const float* src, void* dst, std::size_t n, Dtype to, Overflow overflow);

} // namespace mixprec::autodiff::detail
