#include <mixprec/autodiff/tensor/rounding.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/rounding_tally.hpp>
#include <mixprec/autodiff/tensor/format.hpp>

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <limits>
#include <optional>

namespace mixprec::autodiff {
namespace {

std::atomic<RoundingRecorder*> active_recorder{nullptr};

/// The least float32 bit pattern in [0, infinity] for which `holds` (false below it, true from it on).
template <class Predicate>
std::uint32_t first_pattern(Predicate holds) {
    std::uint32_t lo = 0, hi = 0x7F800000u;
    while (lo < hi) {
        const std::uint32_t mid = lo + (hi - lo) / 2;
        if (holds(mid))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/// Found by bisection on the format's own rounding (encode), so they are its exact boundaries.
template <class F>
RoundingThresholds thresholds_of() {
    using S = typename F::spec;
    const auto code = [](std::uint32_t pattern) { return encode<S>(std::bit_cast<float>(pattern)) & ~S::sign_mask; };
    const std::uint32_t nonzero = first_pattern([&](std::uint32_t p) { return code(p) != 0; });
    const std::uint32_t normal = first_pattern([&](std::uint32_t p) { return code(p) >= (1u << S::man_bits); });
    const std::uint32_t beyond = first_pattern([&](std::uint32_t p) { return code(p) > S::max_code; });
    return {std::bit_cast<float>(nonzero - 1), std::bit_cast<float>(normal), std::bit_cast<float>(beyond)};
}

const std::array<RoundingThresholds, dtype_count>& threshold_table() {
    static const std::array<RoundingThresholds, dtype_count> table{
        RoundingThresholds{0.0f, std::numeric_limits<float>::min(), std::numeric_limits<float>::infinity()},
        thresholds_of<float16>(),
        thresholds_of<bfloat16>(),
        thresholds_of<cbfloat16>(),
        thresholds_of<float8_e4m3>(),
        thresholds_of<float8_e5m2>(),
    };
    return table;
}

/// Exponent histogram counts in four interleaved copies, so that runs of one exponent (the common case)
/// do not wait on their own increments; 32-bit counts, flushed before they could wrap.
class ExponentCounts {
  public:
    void add(const float* src, std::size_t n) {
        std::size_t i = 0;
        for (; i + 4 <= n; i += 4)
            for (std::size_t k = 0; k < 4; ++k) ++bins_[k][(std::bit_cast<std::uint32_t>(src[i + k]) >> 23) & 0xFFu];
        for (; i < n; ++i) ++bins_[0][(std::bit_cast<std::uint32_t>(src[i]) >> 23) & 0xFFu];
        if ((pending_ += n) >= flush_after) flush_to(flushed_);
    }
    /// The counts so far, as RoundingStats keeps them.
    std::vector<std::uint64_t> take() {
        flush_to(flushed_);
        return std::move(flushed_);
    }

  private:
    static constexpr std::size_t flush_after = std::size_t{1} << 30;
    void flush_to(std::vector<std::uint64_t>& out) {
        out.resize(RoundingStats::histogram_bins, 0);
        for (const auto& copy : bins_)
            for (std::size_t b = 0; b < RoundingStats::histogram_bins; ++b) out[b] += copy[b];
        bins_ = {};
        pending_ = 0;
    }
    std::array<std::array<std::uint32_t, RoundingStats::histogram_bins>, 4> bins_{};
    std::size_t pending_ = 0;
    std::vector<std::uint64_t> flushed_;
};

} // namespace

namespace detail {

const tally_bounds& tally_bounds_for(Dtype format) {
    static const std::array<tally_bounds, dtype_count> table = [] {
        std::array<tally_bounds, dtype_count> t{};
        for (int i = 0; i < dtype_count; ++i) {
            const RoundingThresholds& r = threshold_table()[static_cast<std::size_t>(i)];
            t[static_cast<std::size_t>(i)] = {std::bit_cast<std::uint32_t>(r.underflow_max),
                                              std::bit_cast<std::uint32_t>(r.normal_min),
                                              std::bit_cast<std::uint32_t>(r.overflow_min)};
        }
        return t;
    }();
    return table[static_cast<std::size_t>(format)];
}

RoundingStats tallied(const float* src, std::size_t n, Dtype format, bool histogram, const tally_block_fn& block) {
    const tally_bounds& bounds = tally_bounds_for(format);
    tally_counts counts;
    std::optional<ExponentCounts> exponents;
    if (histogram) exponents.emplace();
    for (std::size_t i = 0; i < n; i += tally_block) {
        const std::size_t m = std::min(tally_block, n - i);
        block(i, m, bounds, counts);
        if (exponents) exponents->add(src + i, m);
    }
    RoundingStats stats;
    if (exponents) stats.exponent_histogram = exponents->take();
    stats.count = n;
    stats.zeros = counts.zeros;
    stats.underflow = counts.underflow;
    stats.subnormal = counts.subnormal;
    stats.overflow = counts.overflow;
    stats.nonfinite = counts.nonfinite;
    stats.amax = std::bit_cast<float>(counts.amax_bits);
    return stats;
}

} // namespace detail

RoundingStats& RoundingStats::operator+=(const RoundingStats& other) {
    count += other.count;
    zeros += other.zeros;
    underflow += other.underflow;
    subnormal += other.subnormal;
    overflow += other.overflow;
    nonfinite += other.nonfinite;
    amax = std::max(amax, other.amax);
    if (!other.exponent_histogram.empty()) {
        exponent_histogram.resize(histogram_bins, 0);
        for (std::size_t i = 0; i < histogram_bins; ++i) exponent_histogram[i] += other.exponent_histogram[i];
    }
    return *this;
}

const RoundingThresholds& rounding_thresholds(Dtype format) {
    return threshold_table()[static_cast<std::size_t>(format)];
}

RoundingStats classify(std::span<const float> values, Dtype format, bool histogram) {
    const detail::tally_fn tally = detail::tally_function();
    const float* src = values.data();
    return detail::tallied(src, values.size(), format, histogram,
                           [&](std::size_t at, std::size_t m, const detail::tally_bounds& bounds,
                               detail::tally_counts& counts) { tally(src + at, m, bounds, counts); });
}

RoundingRecorder::RoundingRecorder(RoundingRecorderOptions options)
    : options_(options), outer_(active_recorder.exchange(this)) {}

RoundingRecorder::~RoundingRecorder() {
    active_recorder.store(outer_);
    if (outer_ == nullptr) return;
    const std::scoped_lock lock(outer_->mutex_);
    for (auto& [begin, write] : writes_) outer_->record_locked(begin, std::move(write));
    outer_->total_ += total_;
}

RoundingBatch::RoundingBatch(const void* dst, std::size_t bytes)
    : recorder_(active_rounding_recorder()),
      dst_(dst),
      bytes_(bytes),
      slots_(recorder_ != nullptr ? static_cast<std::size_t>(std::max(1, omp_get_max_threads())) : 0) {}

RoundingBatch::~RoundingBatch() {
    RoundingStats sum;
    for (const Slot& slot : slots_) sum += slot.sum;
    if (sum.count != 0) recorder_->record(dst_, bytes_, sum); // every call that added rounded something
}

void RoundingBatch::add(const RoundingStats& stats) {
    Slot& slot = slots_[static_cast<std::size_t>(omp_get_thread_num()) % slots_.size()];
    const std::scoped_lock lock(slot.mutex);
    slot.sum += stats;
}

RoundingRecorder* active_rounding_recorder() { return active_recorder.load(std::memory_order_acquire); }

RoundingPause::RoundingPause() : paused_(active_recorder.exchange(nullptr)) {}

RoundingPause::~RoundingPause() { active_recorder.store(paused_); }

void RoundingRecorder::record(const void* dst, std::size_t bytes, const RoundingStats& stats) {
    const auto begin = reinterpret_cast<std::uintptr_t>(dst);
    const std::scoped_lock lock(mutex_);
    total_ += stats;
    if (also_ != nullptr) *also_ += stats;
    if (options_.writes) record_locked(begin, {begin + bytes, stats});
}

void RoundingRecorder::also_add_to(RoundingStats* sum) {
    const std::scoped_lock lock(mutex_);
    also_ = sum;
}

void RoundingRecorder::record_locked(std::uintptr_t begin, Write write) {
    // The new write replaces every earlier one it overlaps: those bytes now hold what it wrote.
    erase_locked(begin, write.end);
    writes_.emplace(begin, std::move(write));
}

void RoundingRecorder::erase_locked(std::uintptr_t begin, std::uintptr_t end) {
    auto it = writes_.lower_bound(begin);
    if (it != writes_.begin() && std::prev(it)->second.end > begin) --it;
    while (it != writes_.end() && it->first < end) it = writes_.erase(it);
}

void RoundingRecorder::forget(const void* begin, std::size_t bytes) {
    const auto from = reinterpret_cast<std::uintptr_t>(begin);
    for (RoundingRecorder* r = this; r != nullptr; r = r->outer_) {
        const std::scoped_lock lock(r->mutex_);
        r->erase_locked(from, from + bytes);
    }
}

RoundingStats RoundingRecorder::total() const {
    const std::scoped_lock lock(mutex_);
    return total_;
}

RoundingStats RoundingRecorder::stats_of(const Tensor& tensor) const {
    const auto begin = reinterpret_cast<std::uintptr_t>(tensor.raw());
    const auto end = begin + tensor.nbytes();
    const std::size_t width = size_of(tensor.dtype());
    RoundingStats stats;
    if (options_.histogram) stats.exponent_histogram.assign(RoundingStats::histogram_bins, 0);
    std::vector<float> wide;
    const auto measure = [&](std::uintptr_t from, std::uintptr_t to) { // bytes nobody recorded writing
        if (from >= to) return;
        wide.resize((to - from) / width);
        widen(reinterpret_cast<const void*>(from), tensor.dtype(), wide.data(), wide.size());
        stats += classify(wide, tensor.dtype(), options_.histogram);
    };
    const std::scoped_lock lock(mutex_);
    std::uintptr_t at = begin;
    for (auto it = writes_.lower_bound(begin); it != writes_.end() && it->second.end <= end; ++it) {
        measure(at, it->first);
        stats += it->second.stats;
        at = it->second.end;
    }
    measure(at, end);
    return stats;
}

} // namespace mixprec::autodiff
