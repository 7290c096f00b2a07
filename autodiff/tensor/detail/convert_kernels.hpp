#pragma once
// Internal: the kernel table behind convert.hpp and the generic loops each SIMD path compiles with its
// own instruction set. The loops live in an unnamed namespace so that every translation unit keeps its
// own copy: a weak symbol compiled for AVX-512 must never be picked for the portable path.

#include <mixprec/autodiff/tensor/detail/rounding_tally.hpp>
#include <mixprec/autodiff/tensor/format.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mixprec::autodiff::detail {

using narrow_fn = void (*)(const float* src, void* dst, std::size_t n);
using widen_fn = void (*)(const void* src, float* dst, std::size_t n);
/// Rounds as narrow_fn does (overflow to infinity) and adds what the rounding did to counts, in one pass.
using narrow_tally_fn = void (*)(const float* src, void* dst, std::size_t n, const tally_bounds& bounds,
                                 tally_counts& counts);

/// Indexed by Dtype; entry 0 (float32) is a copy. `tally` counts what a rounding does (rounding.hpp);
/// a path that can round and count in one pass sets narrow_tally for that format (null: round, then tally).
struct convert_kernels {
    narrow_fn narrow[dtype_count];
    narrow_fn narrow_saturate[dtype_count];
    widen_fn widen[dtype_count];
    tally_fn tally;
    narrow_tally_fn narrow_tally[dtype_count];
};

const convert_kernels& portable_kernels();
const convert_kernels& avx2_kernels();
const convert_kernels& avx512_kernels();      ///< AVX-512 F/BW/VL/DQ only
const convert_kernels& avx512_bf16_kernels(); ///< and AVX512-BF16, and AVX512-VBMI if the CPU has it

namespace {

template <class F, bool Saturate>
void narrow_loop(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<typename F::storage*>(dst);
    for (std::size_t i = 0; i < n; ++i) out[i] = encode<typename F::spec>(src[i], Saturate);
}

template <class F>
void widen_loop(const void* src, float* dst, std::size_t n) {
    const auto* in = static_cast<const typename F::storage*>(src);
    if constexpr (sizeof(typename F::storage) == 1) { // 256 patterns: decode each once, then look them up
        static const std::array<float, 256> table = [] {
            std::array<float, 256> t{};
            for (unsigned b = 0; b < 256; ++b) t[b] = decode<typename F::spec>(static_cast<std::uint8_t>(b));
            return t;
        }();
        for (std::size_t i = 0; i < n; ++i) dst[i] = table[in[i]];
    } else {
        for (std::size_t i = 0; i < n; ++i) dst[i] = decode<typename F::spec>(in[i]);
    }
}

/// The end of a block's tally, after its common pass (below) found `top`, the largest magnitude pattern
/// in src[0, n): only if that reaches the overflow threshold (an overflow, an infinity or a NaN: rare) does
/// a second pass count overflows and non-finite values and find the largest finite magnitude.
void tally_rest(const float* src, std::size_t n, std::int32_t top, const tally_bounds& b, tally_counts& c) {
    constexpr std::int32_t inf = 0x7F800000;
    const auto omin = std::int32_t(b.overflow_min);
    if (top >= omin) {
        std::uint32_t below_omin = 0, finite = 0;
        top = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const std::int32_t a = std::bit_cast<std::int32_t>(src[i]) & 0x7FFFFFFF;
            below_omin += a < omin;
            finite += a < inf;
            const std::int32_t finite_a = a < inf ? a : 0;
            top = finite_a > top ? finite_a : top;
        }
        c.overflow += finite - below_omin;
        c.nonfinite += std::uint32_t(n) - finite;
    }
    c.amax_bits = std::max(c.amax_bits, std::uint32_t(top));
}

/// Adds the classes of src[0, n) (n < 2^31) to counts, comparing the bit patterns of magnitudes (ordered
/// as integers for non-negative floats, all below 2^31) with the format's. It counts how many fall below
/// each threshold, and the classes are the differences. The common pass makes three compares per value
/// and keeps the largest pattern; tally_rest handles overflow. Branch-free integer work that each
/// instruction-set path vectorizes with its own flags (signed, because GCC 12 does not vectorize the
/// unsigned maximum here). A fused kernel (narrow_tally_fn) must count exactly as this does.
void tally_loop(const float* src, std::size_t n, const tally_bounds& b, tally_counts& c) {
    const auto above_umax = std::int32_t(b.underflow_max) + 1, nmin = std::int32_t(b.normal_min);
    std::uint32_t zero = 0, at_most_umax = 0, below_nmin = 0;
    std::int32_t top = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const std::int32_t a = std::bit_cast<std::int32_t>(src[i]) & 0x7FFFFFFF;
        zero += a == 0;
        at_most_umax += a < above_umax;
        below_nmin += a < nmin;
        top = a > top ? a : top;
    }
    c.zeros += zero;
    c.underflow += at_most_umax - zero;
    c.subnormal += below_nmin - at_most_umax;
    tally_rest(src, n, top, b, c);
}

void copy_narrow(const float* src, void* dst, std::size_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void copy_widen(const void* src, float* dst, std::size_t n) { std::memcpy(dst, src, n * sizeof(float)); }

/// The table of generic loops; a path overrides the entries it has better instructions for.
constexpr convert_kernels generic_kernels() {
    return {
        {copy_narrow, narrow_loop<float16, false>, narrow_loop<bfloat16, false>, narrow_loop<cbfloat16, false>,
         narrow_loop<float8_e4m3, false>, narrow_loop<float8_e5m2, false>},
        {copy_narrow, narrow_loop<float16, true>, narrow_loop<bfloat16, true>, narrow_loop<cbfloat16, true>,
         narrow_loop<float8_e4m3, true>, narrow_loop<float8_e5m2, true>},
        {copy_widen, widen_loop<float16>, widen_loop<bfloat16>, widen_loop<cbfloat16>, widen_loop<float8_e4m3>,
         widen_loop<float8_e5m2>},
        tally_loop,
        {},
    };
}

} // namespace
} // namespace mixprec::autodiff::detail
