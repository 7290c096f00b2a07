#include <mixprec/autodiff/tensor/convert.hpp>

#include <mixprec/autodiff/tensor/detail/convert_kernels.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <stdexcept>
#include <string>

namespace mixprec::autodiff {
namespace detail {

const convert_kernels& portable_kernels() {
    static constexpr convert_kernels table = generic_kernels();
    return table;
}

} // namespace detail

namespace {

const detail::convert_kernels& kernels_for(Isa level) {
#if defined(MIXPREC_X86_KERNELS)
    switch (level) {
    case Isa::avx512_bf16:
        return detail::avx512_bf16_kernels();
    case Isa::avx512:
        return detail::avx512_kernels();
    case Isa::avx2:
        return detail::avx2_kernels();
    case Isa::portable:
        break;
    }
#endif
    (void)level;
    return detail::portable_kernels();
}

void check_count(const void* src, const void* dst, std::size_t n) {
    if (n != 0 && (src == nullptr || dst == nullptr))
        throw std::invalid_argument("mixprec conversion: null buffer for " + std::to_string(n) + " elements");
}

} // namespace

detail::tally_fn detail::tally_function() { return kernels_for(isa()).tally; }

void detail::narrow_unrecorded(const float* src, void* dst, std::size_t n, Dtype to, Overflow overflow) {
    const auto& k = kernels_for(isa());
    const auto i = static_cast<std::size_t>(to);
    (overflow == Overflow::saturate ? k.narrow_saturate[i] : k.narrow[i])(src, dst, n);
}

namespace {

/// narrow() with telemetry: rounds and counts block by block, and returns the stats.
RoundingStats narrow_counted(const float* src, void* dst, std::size_t n, Dtype to, Overflow overflow, bool histogram) {
    const auto& k = kernels_for(isa());
    const auto i = static_cast<std::size_t>(to);
    const detail::narrow_fn round = overflow == Overflow::saturate ? k.narrow_saturate[i] : k.narrow[i];
    auto* out = static_cast<std::byte*>(dst);
    const std::size_t width = size_of(to);
    const detail::narrow_tally_fn fused = overflow == Overflow::saturate ? nullptr : k.narrow_tally[i];
    return detail::tallied(
        src, n, to, histogram,
        [&](std::size_t at, std::size_t m, const detail::tally_bounds& bounds, detail::tally_counts& counts) {
            if (fused != nullptr) return fused(src + at, out + at * width, m, bounds, counts);
            round(src + at, out + at * width, m);
            k.tally(src + at, m, bounds, counts);
        });
}

} // namespace

void narrow(const float* src, void* dst, std::size_t n, Dtype to, Overflow overflow) {
    check_count(src, dst, n);
    if (n == 0) return;
    RoundingRecorder* recorder = active_rounding_recorder();
    if (recorder == nullptr) [[likely]]
        return detail::narrow_unrecorded(src, dst, n, to, overflow);
    recorder->record(dst, n * size_of(to), narrow_counted(src, dst, n, to, overflow, recorder->histogram()));
}

void narrow(const float* src, void* dst, std::size_t n, Dtype to, RoundingBatch& batch, Overflow overflow) {
    check_count(src, dst, n);
    if (n == 0) return;
    RoundingRecorder* recorder = batch.recorder();
    if (recorder == nullptr) [[likely]]
        return detail::narrow_unrecorded(src, dst, n, to, overflow);
    batch.add(narrow_counted(src, dst, n, to, overflow, recorder->histogram()));
}

void widen(const void* src, Dtype from, float* dst, std::size_t n) {
    check_count(src, dst, n);
    if (n == 0) return;
    kernels_for(isa()).widen[static_cast<std::size_t>(from)](src, dst, n);
}

} // namespace mixprec::autodiff
