// AVX2 + F16C conversion kernels. Compiled with -mavx2 -mf16c -mfma; run only when the CPU has them.
#include <mixprec/autodiff/tensor/detail/convert_kernels.hpp>

#include <immintrin.h>

namespace mixprec::autodiff::detail {
namespace {

void narrow_f16(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<std::uint16_t*>(dst);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
    for (; i < n; ++i) out[i] = float16(src[i]).bits();
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

/// narrow_f16 and tally_loop in one pass: the compares of the common pass run beside the conversion on
/// the vector it has just loaded (about a third of what a second pass over the block costs).
void narrow_tally_f16(const float* src, void* dst, std::size_t n, const tally_bounds& b, tally_counts& c) {
    auto* out = static_cast<std::uint16_t*>(dst);
    const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF), zero = _mm256_setzero_si256();
    const __m256i above_umax = _mm256_set1_epi32(std::int32_t(b.underflow_max) + 1),
                  nmin = _mm256_set1_epi32(std::int32_t(b.normal_min));
    __m256i zeros = zero, at_most_umax = zero, below_nmin = zero, top = zero;
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(src + i);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), magnitude);
        zeros = _mm256_sub_epi32(zeros, _mm256_cmpeq_epi32(a, zero));
        at_most_umax = _mm256_sub_epi32(at_most_umax, _mm256_cmpgt_epi32(above_umax, a));
        below_nmin = _mm256_sub_epi32(below_nmin, _mm256_cmpgt_epi32(nmin, a));
        top = _mm256_max_epi32(top, a);
    }
    const std::uint32_t z = lane_sum(zeros), u = lane_sum(at_most_umax), s = lane_sum(below_nmin);
    c.zeros += z;
    c.underflow += u - z;
    c.subnormal += s - u;
    tally_rest(src, i, lane_max(top), b, c);
    for (std::size_t j = i; j < n; ++j) out[j] = float16(src[j]).bits();
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
        k.narrow[static_cast<int>(Dtype::float16)] = narrow_f16;
        k.narrow_tally[static_cast<int>(Dtype::float16)] = narrow_tally_f16;
        k.widen[static_cast<int>(Dtype::float16)] = widen_f16;
        return k;
    }();
    return table;
}

} // namespace mixprec::autodiff::detail
