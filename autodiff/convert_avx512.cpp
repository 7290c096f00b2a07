// AVX-512 conversion kernels. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c; run only
// when the CPU has them. The bfloat16 narrowing uses AVX512-BF16 and is installed only when present.
#include "convert_kernels.hpp"

#include <immintrin.h>

#include <algorithm>

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

/// Applies a 16-lane kernel to n elements: full blocks, then one masked block for the tail.
template <class In, class Out, class Load, class Kernel, class Store>
void blocks_of_16(const In* in, Out* out, std::size_t n, Load load, Kernel kernel, Store store) {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) store(out + i, kernel(load(in + i, __mmask16(0xffff))), __mmask16(0xffff));
    if (i < n) store(out + i, kernel(load(in + i, tail_mask(n - i))), tail_mask(n - i));
}

const auto load_u16 = [](const std::uint16_t* p, __mmask16 m) { return _mm256_maskz_loadu_epi16(m, p); };
const auto load_u8 = [](const std::uint8_t* p, __mmask16 m) { return _mm_maskz_loadu_epi8(m, p); };
// Stores take the lane mask; full blocks pass all ones, which folds to a plain store (masked stores of
// whole vectors are markedly slower on some CPUs).
const auto store_f32 = [](float* p, __m512 v, __mmask16 m) {
    if (m == 0xffff) _mm512_storeu_ps(p, v);
    else _mm512_mask_storeu_ps(p, m, v);
};

/// bfloat16 -> float32 is a 16-bit shift; NaNs get the quiet bit, as decode<bfloat16> gives them.
__m512 bf16_to_f32(__m256i h) {
    const __m512i x = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(x, nan, x, _mm512_set1_epi32(0x00400000)));
}

/// float8_e5m2 is the top byte of a float16, so vcvtph2ps widens it exactly (NaNs quieted, as decode does).
__m512 e5m2_to_f32(__m128i b) { return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8)); }

/// cbfloat16 -> float32: re-bias the exponent of normals with an integer add; subnormals m * 2^-39 are
/// float(m) with its exponent field lowered by 39 (exact, no float arithmetic); all-ones exponent is
/// infinity or a NaN that gets the quiet bit, as decode<cbfloat16> gives them.
__m512 cbf16_to_f32(__m256i h) {
    using S = cbfloat16::spec;
    const __m512i b = _mm512_cvtepu16_epi32(h);
    const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7fff));
    const __m512i m = _mm512_and_si512(b, _mm512_set1_epi32(int(S::man_mask)));
    const __mmask16 nonzero_m = _mm512_test_epi32_mask(m, m);
    const __m512i shifted = _mm512_slli_epi32(mag, 23 - S::man_bits);
    __m512i r = _mm512_add_epi32(shifted, _mm512_set1_epi32((127 - S::bias) << 23));
    const __m512i sub = _mm512_maskz_sub_epi32(nonzero_m, _mm512_castps_si512(_mm512_cvtepi32_ps(m)),
                                               _mm512_set1_epi32((S::bias + S::man_bits - 1) << 23));
    r = _mm512_mask_mov_epi32(r, _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(1 << S::man_bits)), sub);
    const __mmask16 special = _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(int(S::exp_mask)));
    const __m512i inf_nan = _mm512_or_si512(_mm512_set1_epi32(0x7f800000), _mm512_and_si512(shifted, _mm512_set1_epi32(0x7fffff)));
    r = _mm512_mask_mov_epi32(r, special, _mm512_mask_or_epi32(inf_nan, nonzero_m, inf_nan, _mm512_set1_epi32(0x400000)));
    return _mm512_castsi512_ps(_mm512_or_si512(r, _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x8000)), 16)));
}

/// Every float8_e4m3 value is a float16 value, so widening goes through a 128-entry table of float16
/// bits (two vpermt2w lookups of 64 entries, 32 lanes each) and vcvtph2ps. The NaN entry is float16's
/// quiet NaN, which vcvtph2ps widens to float32's.
struct e4m3_table {
    alignas(64) std::uint16_t bits[128];
    e4m3_table() {
        for (int i = 0; i < 128; ++i)
            bits[i] = float16(float(float8_e4m3::from_bits(static_cast<std::uint8_t>(i)))).bits();
    }
};

void widen_e4m3(const void* src, float* dst, std::size_t n) {
    static const e4m3_table table;
    const __m512i t0 = _mm512_load_si512(table.bits), t1 = _mm512_load_si512(table.bits + 32);
    const __m512i t2 = _mm512_load_si512(table.bits + 64), t3 = _mm512_load_si512(table.bits + 96);
    const auto* in = static_cast<const std::uint8_t*>(src);
    for (std::size_t i = 0; i < n; i += 32) {
        const std::size_t left = std::min<std::size_t>(32, n - i);
        const __mmask32 m = left == 32 ? ~__mmask32(0) : (__mmask32(1) << left) - 1;
        const __m512i b = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, in + i));
        const __m512i low = _mm512_permutex2var_epi16(t0, b, t1);  // entries 0..63 (index bits 0..5)
        const __m512i high = _mm512_permutex2var_epi16(t2, b, t3); // entries 64..127
        __m512i h = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(b, _mm512_set1_epi16(0x40)), low, high);
        h = _mm512_or_si512(h, _mm512_and_si512(_mm512_slli_epi16(b, 8), _mm512_set1_epi16(int16_t(0x8000))));
        const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h)), hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
        if (left == 32) {
            _mm512_storeu_ps(dst + i, lo);
            _mm512_storeu_ps(dst + i + 16, hi);
        } else {
            _mm512_mask_storeu_ps(dst + i, __mmask16(m), lo);
            _mm512_mask_storeu_ps(dst + i + 16, __mmask16(m >> 16), hi);
        }
    }
}

void widen_cbf16(const void* src, float* dst, std::size_t n) {
    blocks_of_16(static_cast<const std::uint16_t*>(src), dst, n, load_u16, cbf16_to_f32, store_f32);
}

void widen_bf16(const void* src, float* dst, std::size_t n) {
    blocks_of_16(static_cast<const std::uint16_t*>(src), dst, n, load_u16, bf16_to_f32, store_f32);
}
void widen_e5m2(const void* src, float* dst, std::size_t n) {
    blocks_of_16(static_cast<const std::uint8_t*>(src), dst, n, load_u8, e5m2_to_f32, store_f32);
}

/// float32 -> format S, 16 lanes, the bits of encode<S>. Normal results round with integer adds, as in
/// encode; subnormal results come from one float add, |x| + 2^k, whose ulp is the format's smallest
/// subnormal: the add rounds to nearest even (embedded rounding, whatever MXCSR says) and the sum's low
/// bits are the subnormal code. Overflow is one unsigned min, because every overflowing code is larger
/// than the code it becomes (infinity, NaN for e4m3, or the largest finite when saturating).
template <class S, bool Saturate>
__m512i encode_16(__m512 v) {
    constexpr int shift = 23 - S::man_bits;
    constexpr std::uint32_t round_and_rebias = ((1u << (shift - 1)) - 1) - (std::uint32_t(127 - S::bias) << 23);
    constexpr std::uint32_t min_normal = std::uint32_t(128 - S::bias) << 23;              // float bits of 2^(1-bias)
    constexpr std::uint32_t magic = std::uint32_t(127 + 1 - S::bias - S::man_bits + 23) << 23; // ulp = 2^(1-bias-M)
    constexpr std::uint32_t overflow = Saturate ? S::max_code : S::max_code + 1;           // inf, or e4m3's NaN
    const __m512i x = _mm512_castps_si512(v);
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, shift), _mm512_set1_epi32(1));
    const __m512i normal =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(int(round_and_rebias))), lsb), shift);
    const __m512 sum = _mm512_add_round_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(_mm512_set1_epi32(int(magic))),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i subnormal = _mm512_sub_epi32(_mm512_castps_si512(sum), _mm512_set1_epi32(int(magic)));
    __m512i r = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(int(min_normal))), normal, subnormal);
    r = _mm512_min_epu32(r, _mm512_set1_epi32(int(overflow)));
    const __m512i nan = S::has_inf ? _mm512_or_si512(_mm512_set1_epi32(int(S::nan_code)),
                                                     _mm512_and_si512(_mm512_srli_epi32(a, shift),
                                                                      _mm512_set1_epi32(int(S::man_mask))))
                                   : _mm512_set1_epi32(int(S::nan_code));
    r = _mm512_mask_blend_epi32(_mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000)), r, nan);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(x, 32 - S::width), _mm512_set1_epi32(int(S::sign_mask)));
    return _mm512_or_si512(r, sign);
}

const auto load_f32 = [](const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); };
const auto store_u16 = [](std::uint16_t* p, __m512i v, __mmask16 m) {
    if (m == 0xffff) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
    else _mm512_mask_cvtepi32_storeu_epi16(p, m, v);
};
const auto store_u8 = [](std::uint8_t* p, __m512i v, __mmask16 m) {
    if (m == 0xffff) _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v));
    else _mm512_mask_cvtepi32_storeu_epi8(p, m, v);
};

template <class F, bool Saturate>
void narrow_16(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<typename F::storage*>(dst);
    if constexpr (sizeof(typename F::storage) == 2)
        blocks_of_16(src, out, n, load_f32, encode_16<typename F::spec, Saturate>, store_u16);
    else
        blocks_of_16(src, out, n, load_f32, encode_16<typename F::spec, Saturate>, store_u8);
}

/// vcvtneps2bf16 rounds like encode<bfloat16> except that it flushes float32 subnormal inputs to zero.
/// Lanes holding a subnormal are redone with integer rounding: (a + 0x7fff + lsb) >> 16.
[[gnu::target("avx512bf16")]] __m256i bf16_from(__m512 v) {
    __m256i r = (__m256i)_mm512_cvtneps_pbh(v);
    const __mmask16 sub = _mm512_fpclass_ps_mask(v, 0x20); // 0x20: denormal
    if (sub != 0) [[unlikely]] {
        const __m512i x = _mm512_castps_si512(v);
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
        k.widen[static_cast<int>(Dtype::bfloat16)] = widen_bf16;
        k.narrow[static_cast<int>(Dtype::cbfloat16)] = narrow_16<cbfloat16, false>;
        k.narrow[static_cast<int>(Dtype::float8_e4m3)] = narrow_16<float8_e4m3, false>;
        k.narrow[static_cast<int>(Dtype::float8_e5m2)] = narrow_16<float8_e5m2, false>;
        k.narrow_saturate[static_cast<int>(Dtype::cbfloat16)] = narrow_16<cbfloat16, true>;
        k.narrow_saturate[static_cast<int>(Dtype::float8_e4m3)] = narrow_16<float8_e4m3, true>;
        k.narrow_saturate[static_cast<int>(Dtype::float8_e5m2)] = narrow_16<float8_e5m2, true>;
        k.widen[static_cast<int>(Dtype::cbfloat16)] = widen_cbf16;
        k.widen[static_cast<int>(Dtype::float8_e4m3)] = widen_e4m3;
        k.widen[static_cast<int>(Dtype::float8_e5m2)] = widen_e5m2;
        if (__builtin_cpu_supports("avx512bf16")) k.narrow[static_cast<int>(Dtype::bfloat16)] = narrow_bf16;
        return k;
    }();
    return table;
}

} // namespace mixprec::autodiff::detail
