// AVX2 + F16C conversion kernels. Compiled with -mavx2 -mf16c -mfma; run only when the CPU has them.
#include <mixprec/autodiff/tensor/detail/convert_kernels.hpp>

#include <immintrin.h>

namespace mixprec::autodiff::detail {
namespace {

/// float32 → float16 bits, 8 lanes: vcvtps2ph rounds to nearest even and keeps subnormals, as encode does.
struct to_float16 {
    using format = float16;
    static constexpr bool saturate = false;
    static __m128i convert(__m256 v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
};

/// float32 → bfloat16 bits, 8 lanes, as encode<bfloat16>: bfloat16 has float32's exponent, so every result is
/// the top half of the float32 pattern rounded at bit 16, ties to even (float32 subnormals included). The
/// rounding carry never reaches the sign bit of a number, and a magnitude that rounds past the largest
/// finite comes out as infinity's pattern by itself (or the largest finite, clamped, when saturating). A NaN
/// keeps its sign and top payload bits and gets the quiet bit.
template <bool Saturate>
struct to_bfloat16 {
    using format = bfloat16;
    static constexpr bool saturate = Saturate;
    static __m128i convert(__m256 v) {
        const __m256i x = _mm256_castps_si256(v);
        const __m256i sign = _mm256_set1_epi32(std::int32_t(0x80000000u));
        const __m256i a = _mm256_andnot_si256(sign, x);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb);
        if constexpr (Saturate) // the magnitude at most the largest finite's pattern, the sign put back
            r = _mm256_or_si256(_mm256_min_epi32(_mm256_andnot_si256(sign, r), _mm256_set1_epi32(0x7F7FFFFF)),
                                _mm256_and_si256(x, sign));
        const __m256i quiet_nan = _mm256_or_si256(x, _mm256_set1_epi32(0x00400000));
        r = _mm256_blendv_epi8(r, quiet_nan, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000)));
        // The top halves of the 8 lanes: bytes 2-3 of each lane to the low 8 bytes of each 128-bit half,
        // then the two halves' low quarters together.
        const __m256i top =
            _mm256_shuffle_epi8(r, _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6,
                                                    7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1));
        return _mm256_castsi256_si128(_mm256_permute4x64_epi64(top, 0b1000));
    }
};

template <class To>
void scalar_tail(const float* src, std::uint16_t* out, std::size_t from, std::size_t n) {
    for (std::size_t j = from; j < n; ++j) out[j] = encode<typename To::format::spec>(src[j], To::saturate);
}

template <class To>
void narrow_8(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<std::uint16_t*>(dst);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), To::convert(_mm256_loadu_ps(src + i)));
    scalar_tail<To>(src, out, i, n);
}

/// horizontal sum and maximum of 8 lanes
std::uint32_t lane_sum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return std::uint32_t(_mm_cvtsi128_si32(s));
}
std::int32_t lane_max(__m256i v) {
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(m);
}

/// The lanes of narrow_tally_8's common pass: minus the counts of each lane below each threshold, and
/// the largest magnitude pattern.
struct tally_lanes {
    __m256i zeros, at_most_umax, below_nmin, top;
};

/// Rounds the whole vectors of src[0, n) into out and counts them into `lanes`; returns how many values
/// that was. Not inlined: inlined into its caller, GCC 12 added a register move per counter and vector
/// (19 instructions per 8 float16 values instead of 15).
template <class To>
[[gnu::noinline]] std::size_t narrow_count_vectors(const float* src, std::uint16_t* out, std::size_t n,
                                                   const tally_bounds& b, tally_lanes& lanes) {
    const __m256i sign = _mm256_set1_epi32(std::int32_t(0x80000000u)), zero = _mm256_setzero_si256();
    const __m256i above_umax = _mm256_set1_epi32(std::int32_t(b.underflow_max) + 1),
                  nmin = _mm256_set1_epi32(std::int32_t(b.normal_min));
    __m256i zeros = zero, at_most_umax = zero, below_nmin = zero, top = zero;
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(src + i);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), To::convert(v));
        const __m256i a = _mm256_andnot_si256(sign, _mm256_castps_si256(v)); // as to_bfloat16 has it already
        // adding the compare masks (−1 where true) counts downwards, and keeps each accumulator in place
        zeros = _mm256_add_epi32(zeros, _mm256_cmpeq_epi32(a, zero));
        at_most_umax = _mm256_add_epi32(at_most_umax, _mm256_cmpgt_epi32(above_umax, a));
        below_nmin = _mm256_add_epi32(below_nmin, _mm256_cmpgt_epi32(nmin, a));
        top = _mm256_max_epi32(top, a);
    }
    lanes = {zeros, at_most_umax, below_nmin, top};
    return i;
}

/// narrow_8 and tally_loop in one pass: the compares of the common pass run beside the conversion on the
/// vector it has just loaded (about a third of what a second pass over the block costs).
template <class To>
void narrow_tally_8(const float* src, void* dst, std::size_t n, const tally_bounds& b, tally_counts& c) {
    auto* out = static_cast<std::uint16_t*>(dst);
    tally_lanes lanes;
    const std::size_t i = narrow_count_vectors<To>(src, out, n, b, lanes);
    const std::uint32_t z = 0u - lane_sum(lanes.zeros), u = 0u - lane_sum(lanes.at_most_umax),
                        s = 0u - lane_sum(lanes.below_nmin);
    c.zeros += z;
    c.underflow += u - z;
    c.subnormal += s - u;
    tally_rest(src, i, lane_max(lanes.top), b, c);
    scalar_tail<To>(src, out, i, n);
    tally_loop(src + i, n - i, b, c);
}

void widen_f16(const void* src, float* dst, std::size_t n) {
    const auto* in = static_cast<const std::uint16_t*>(src);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    for (; i < n; ++i) dst[i] = float(float16::from_bits(in[i]));
}

} // namespace

const convert_kernels& avx2_kernels() {
    static const convert_kernels table = [] {
        convert_kernels k = generic_kernels();
        constexpr auto f16 = static_cast<int>(Dtype::float16), bf16 = static_cast<int>(Dtype::bfloat16);
        k.narrow[f16] = narrow_8<to_float16>;
        k.narrow_tally[f16] = narrow_tally_8<to_float16>;
        k.widen[f16] = widen_f16;
        k.narrow[bf16] = narrow_8<to_bfloat16<false>>;
        k.narrow_saturate[bf16] = narrow_8<to_bfloat16<true>>;
        k.narrow_tally[bf16] = narrow_tally_8<to_bfloat16<false>>;
        return k;
    }();
    return table;
}

} // namespace mixprec::autodiff::detail
