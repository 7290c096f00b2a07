#pragma once
/// Rounding telemetry: what each rounding into a narrow format loses, counted by narrow() itself.
///
/// Every value rounded from float32 into a format falls in one class, decided by its magnitude |x|
/// before rounding and the format's thresholds (each the exact boundary of round-to-nearest-even):
///
///   class        |x| before rounding                          after rounding
///   zero         0                                            0
///   underflow    0 < |x| ≤ largest value that rounds to 0     0: the value is lost
///   subnormal    the range that rounds to a nonzero subnormal a nonzero subnormal (fewer digits kept)
///   normal       the range that rounds to a normal value       a normal value
///   overflow     finite, at least the least value that rounds infinity, NaN (float8_e4m3), or the largest
///                beyond the largest finite                     finite value when narrow() saturates
///   nonfinite    inf or NaN                                   inf or NaN (or saturated)
///
/// A RoundingRecorder, while it lives, makes narrow() count these classes (and the largest finite |x|,
/// and optionally a histogram of exponents) for every call, on any thread, block by block as it rounds:
/// the values are read while they are in cache, with no pass of their own, and where a path has a fused
/// kernel (float16 and bfloat16 at avx2) they are counted on the vector being converted. A kernel that
/// rounds one tensor in many pieces (chunks, row blocks, on several threads) gathers their counts in a
/// RoundingBatch and records them once. Without a recorder narrow() counts nothing and costs one load
/// more than it did. Counts are integers and amax is a maximum, so they are the same at every
/// instruction-set level and however the work is split.
///
/// Only narrow() counts. The one kernel that rounds by other means is oneDNN's bfloat16 matmul at the
/// avx512_bf16 level (kernels_matmul.hpp), which rounds its products itself: stats_of classifies those
/// results as stored, so what that rounding lost to underflow (it flushes results below 2^-126 in
/// magnitude) or to overflow (beyond float32's range, as bfloat16's) is not seen there.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <vector>

namespace mixprec::autodiff {

/// What rounding a set of values into one format did to them (see the table above).
struct RoundingStats {
    std::uint64_t count = 0;     ///< values rounded
    std::uint64_t zeros = 0;     ///< zero before rounding
    std::uint64_t underflow = 0; ///< nonzero before rounding, zero after
    std::uint64_t subnormal = 0; ///< rounded to a nonzero subnormal
    std::uint64_t overflow = 0;  ///< finite before rounding; infinite, NaN or saturated after
    std::uint64_t nonfinite = 0; ///< inf or NaN before rounding
    float amax = 0;              ///< the largest finite magnitude before rounding
    /// Empty unless asked for; else 256 counts indexed by the float32 biased exponent of |x| before
    /// rounding: bin e > 0 holds 2^(e-127) ≤ |x| < 2^(e-126), bin 0 zeros and float32 subnormals, bin 255
    /// infinities and NaNs.
    std::vector<std::uint64_t> exponent_histogram{};

    static constexpr std::size_t histogram_bins = 256;

    /// Sums the counts and the histograms, keeps the larger amax.
    RoundingStats& operator+=(const RoundingStats& other);
    friend bool operator==(const RoundingStats&, const RoundingStats&) = default;
};

/// The exact class boundaries of rounding float32 into `format`, as float32 magnitudes.
struct RoundingThresholds {
    float underflow_max; ///< the largest |x| that rounds to zero (0 for float32)
    float normal_min;    ///< the least |x| that rounds to a normal value
    float overflow_min;  ///< the least |x| that rounds beyond the largest finite (infinity for float32)
};
const RoundingThresholds& rounding_thresholds(Dtype format);

/// The stats of rounding `values` into `format` as narrow() would, without storing the results.
RoundingStats classify(std::span<const float> values, Dtype format, bool histogram = false);

struct RoundingRecorderOptions {
    bool histogram = false; ///< also count RoundingStats::exponent_histogram (costs about 1 ns per value)
    bool writes = true;     ///< keep where each rounding wrote, for stats_of (false: total() only)
};

/// Records every narrow() in the process while it lives: the stats of each call, with the memory it
/// wrote. Recorders nest as scopes: a new one takes over recording until it is destroyed, and then hands
/// what it recorded to the one it interrupted. Make and destroy them on one thread, innermost first; the
/// kernels that run while they live may use any thread.
class RoundingRecorder {
  public:
    explicit RoundingRecorder(RoundingRecorderOptions options = {});
    ~RoundingRecorder();
    RoundingRecorder(const RoundingRecorder&) = delete;
    RoundingRecorder& operator=(const RoundingRecorder&) = delete;

    /// Everything rounded while recording (and in the scopes nested in it), merged.
    RoundingStats total() const;

    /// The rounding that gave `tensor` its stored values: the stats of the latest narrow() into each part
    /// of its storage while recording. A part no recorded narrow() wrote (a float32 tensor, or zeros made
    /// directly) is classified from its stored values: nothing was lost there that anyone saw.
    RoundingStats stats_of(const Tensor& tensor) const;

    bool histogram() const { return options_.histogram; }

    /// From now on, every rounding recorded is also added to `*sum` (null: to nothing more).
    void also_add_to(RoundingStats* sum);

    /// Called by narrow(): `bytes` bytes at `dst` were written by a rounding described by `stats`.
    void record(const void* dst, std::size_t bytes, const RoundingStats& stats);
    /// Called when a tensor's storage is allocated: what was recorded there belonged to freed memory, so
    /// this recorder and those it interrupted forget it.
    void forget(const void* begin, std::size_t bytes);

  private:
    struct Write {
        std::uintptr_t end;
        RoundingStats stats;
    };
    void record_locked(std::uintptr_t begin, Write write);
    void erase_locked(std::uintptr_t begin, std::uintptr_t end);

    RoundingRecorderOptions options_;
    RoundingRecorder* outer_;
    mutable std::mutex mutex_;
    std::map<std::uintptr_t, Write> writes_; // by first byte; a later write replaces what it overlaps
    RoundingStats total_;
    RoundingStats* also_ = nullptr;
};

/// One write made of many narrow() calls: the chunks of an elementwise kernel, the row blocks of a product,
/// on any threads. While a recorder is active, narrow(…, batch) adds each call's stats here instead of
/// recording them, and the batch records their sum as one write of its whole region when it ends: one
/// entry for the recorder, where one per call would cost as much as the counting. Each OpenMP thread adds
/// to a slot of its own, so that threads counting their chunks do not pass one cache line back and forth.
/// The calls must write inside the region, and no other rounding may write there while the batch lives.
/// Without a recorder (when the batch is made) it does nothing.
class RoundingBatch {
  public:
    RoundingBatch(const void* dst, std::size_t bytes);
    explicit RoundingBatch(const Tensor& tensor) : RoundingBatch(tensor.raw(), tensor.nbytes()) {}
    /// Records what was added (the recorder's map may allocate: std::bad_alloc ends the program here).
    ~RoundingBatch();
    RoundingBatch(const RoundingBatch&) = delete;
    RoundingBatch& operator=(const RoundingBatch&) = delete;

    /// The recorder active when the batch was made, or null.
    RoundingRecorder* recorder() const { return recorder_; }
    /// Adds the stats of one call (any thread).
    void add(const RoundingStats& stats);

  private:
    struct alignas(64) Slot {
        std::mutex mutex; // uncontended unless threads of two teams share a thread number
        RoundingStats sum;
    };
    RoundingRecorder* recorder_;
    const void* dst_;
    std::size_t bytes_;
    std::vector<Slot> slots_; // by OpenMP thread number, modulo their count; empty without a recorder
};

/// The recorder narrow() reports to now, or null.
RoundingRecorder* active_rounding_recorder();

/// While it lives, narrow() records nothing (for roundings outside what is watched: a variable's working
/// copy, refreshed from its master after an update). Scoped as recorders are.
class RoundingPause {
  public:
    RoundingPause();
    ~RoundingPause();
    RoundingPause(const RoundingPause&) = delete;
    RoundingPause& operator=(const RoundingPause&) = delete;

  private:
    RoundingRecorder* paused_;
};

} // namespace mixprec::autodiff
