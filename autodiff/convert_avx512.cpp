// AVX-512 conversion kernels. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c; run only
// when the CPU has them. The bfloat16 narrowing uses AVX512-BF16 and is installed only when present.
#include "convert_kernels.hpp"

#include <immintrin.h>

namespace mixprec::autodiff::detail {
namespace {

__mmask16 tail_mask(std::size_t left) { return static_cast<__mmask16>((1u << left) - 1); }

void narrow_f16(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<std::uint16_t*>(dst);
    constexpr int rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), rounding));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), rounding));
    }
}

void widen_f16(const void* src, float* dst, std::size_t n) {
    const auto* in = static_cast<const std::uint16_t*>(src);
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, in + i)));
    }
}

/// vcvtneps2bf16 rounds like encode<bfloat16> except that it flushes float32 subnormal inputs to zero.
/// Lanes holding a subnormal are redone with integer rounding: (a + 0x7fff + lsb) >> 16.
[[gnu::target("avx512bf16")]] __m256i bf16_from(__m512 v) {
    __m256i r = (__m256i)_mm512_cvtneps_pbh(v);
    const __m512i x = _mm512_castps_si512(v);
    const __m512i exp = _mm512_and_si512(x, _mm512_set1_epi32(0x7f800000));
    const __m512i mag = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 sub = _mm512_cmpeq_epi32_mask(exp, _mm512_setzero_si512()) &
                          _mm512_cmpneq_epi32_mask(mag, _mm512_setzero_si512());
    if (sub != 0) [[unlikely]] {
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
        const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
        r = _mm256_mask_blend_epi16(sub, r, _mm512_cvtepi32_epi16(rounded));
    }
    return r;
}

[[gnu::target("avx512bf16")]] void narrow_bf16(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<std::uint16_t*>(dst);
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bf16_from(_mm512_loadu_ps(src + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(out + i, m, bf16_from(_mm512_maskz_loadu_ps(m, src + i)));
    }
}

} // namespace

const convert_kernels& avx512_kernels() {
    static const convert_kernels table = [] {
        convert_kernels k = generic_kernels();
        k.narrow[static_cast<int>(Dtype::float16)] = narrow_f16;
        k.widen[static_cast<int>(Dtype::float16)] = widen_f16;
        if (__builtin_cpu_supports("avx512bf16")) k.narrow[static_cast<int>(Dtype::bfloat16)] = narrow_bf16;
        return k;
    }();
    return table;
}

} // namespace mixprec::autodiff::detail
