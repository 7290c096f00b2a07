// AVX-512 conversion kernels. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c; run only
// at the avx512 level and above (isa.hpp). At avx512_bf16 the bfloat16 narrowing uses AVX512-BF16, and the
// cbfloat16 and FP8 narrowings and the float8_e4m3 widening use AVX512-VBMI where the CPU has it.
#include <mixprec/autodiff/tensor/detail/convert_kernels.hpp>
#include <mixprec/autodiff/tensor/isa.hpp>

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

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
    if (m == 0xffff)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, m, v);
};

/// bfloat16 -> float32 is a 16-bit shift; NaNs get the quiet bit, as decode<bfloat16> gives them.
__m512 bf16_to_f32(__m256i h) {
    const __m512i x = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(x, nan, x, _mm512_set1_epi32(0x00400000)));
}

/// float8_e5m2 is the top byte of a float16, so vcvtph2ps widens it exactly (NaNs quieted, as decode does).
__m512 e5m2_to_f32(__m128i b) { return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8)); }

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
        const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h)),
                     hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
        if (left == 32) {
            _mm512_storeu_ps(dst + i, lo);
            _mm512_storeu_ps(dst + i + 16, hi);
        } else {
            _mm512_mask_storeu_ps(dst + i, __mmask16(m), lo);
            _mm512_mask_storeu_ps(dst + i + 16, __mmask16(m >> 16), hi);
        }
    }
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
    constexpr std::uint32_t min_normal = std::uint32_t(128 - S::bias) << 23; // float bits of 2^(1-bias)
    constexpr std::uint32_t magic = std::uint32_t(127 + 1 - S::bias - S::man_bits + 23) << 23; // ulp = 2^(1-bias-M)
    constexpr std::uint32_t overflow = Saturate ? S::max_code : S::max_code + 1;               // inf, or e4m3's NaN
    const __m512i x = _mm512_castps_si512(v);
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, shift), _mm512_set1_epi32(1));
    const __m512i normal =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(int(round_and_rebias))), lsb), shift);
    const __m512 sum = _mm512_add_round_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(_mm512_set1_epi32(int(magic))),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i subnormal = _mm512_sub_epi32(_mm512_castps_si512(sum), _mm512_set1_epi32(int(magic)));
    __m512i r =
        _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(int(min_normal))), normal, subnormal);
    r = _mm512_min_epu32(r, _mm512_set1_epi32(int(overflow)));
    const __m512i nan =
        S::has_inf ? _mm512_or_si512(_mm512_set1_epi32(int(S::nan_code)),
                                     _mm512_and_si512(_mm512_srli_epi32(a, shift), _mm512_set1_epi32(int(S::man_mask))))
                   : _mm512_set1_epi32(int(S::nan_code));
    r = _mm512_mask_blend_epi32(_mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000)), r, nan);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(x, 32 - S::width), _mm512_set1_epi32(int(S::sign_mask)));
    return _mm512_or_si512(r, sign);
}

const auto load_f32 = [](const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); };
const auto store_u16 = [](std::uint16_t* p, __m512i v, __mmask16 m) {
    if (m == 0xffff)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
    else
        _mm512_mask_cvtepi32_storeu_epi16(p, m, v);
};
const auto store_u8 = [](std::uint8_t* p, __m512i v, __mmask16 m) {
    if (m == 0xffff)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v));
    else
        _mm512_mask_cvtepi32_storeu_epi8(p, m, v);
};

/// The narrowings for CPUs without AVX512-VBMI.
template <class F, bool Saturate>
void narrow_16(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<typename F::storage*>(dst);
    if constexpr (sizeof(typename F::storage) == 2)
        blocks_of_16(src, out, n, load_f32, encode_16<typename F::spec, Saturate>, store_u16);
    else
        blocks_of_16(src, out, n, load_f32, encode_16<typename F::spec, Saturate>, store_u8);
}

/// MXCSR's flush-to-zero (0x8000) and denormals-are-zero (0x40) bits. The kernels below make and read
/// float32 subnormals on purpose, so they run with both clear; -ffast-math programs set them at start-up.
constexpr unsigned flush_bits = 0x8040;

/// Runs a kernel with FTZ and DAZ clear and puts MXCSR back afterwards; reading MXCSR costs a few cycles,
/// writing it only happens when one of them is set. The kernel is not inlined, so that no float
/// operation of it can be moved across the MXCSR writes.
template <auto Kernel, class Src, class Dst>
void keep_subnormals(Src src, Dst dst, std::size_t n) {
    const unsigned csr = _mm_getcsr();
    if ((csr & flush_bits) == 0) [[likely]] {
        Kernel(src, dst, n);
        return;
    }
    _mm_setcsr(csr & ~flush_bits);
    Kernel(src, dst, n);
    _mm_setcsr(csr);
}

constexpr int round_exact = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

__m512 splat_bits(std::uint32_t bits) { return _mm512_castsi512_ps(_mm512_set1_epi32(int(bits))); }

// float32 -> cbfloat16 / float8, rounded by the FPU. With c the power of two of |x|'s binade (at least
// the format's smallest normal), the float q = c * 1.5 * 2^(23 - M) * 2^(bias - 127) has as its ulp the
// format's ulp at x times 2^(bias - 127). So the fma y = x * 2^(bias - 127) + q rounds x to the format, to
// nearest even (q is even in ulps; embedded rounding, whatever MXCSR says), for both signs, and y - q is
// the rounded x times 2^(bias - 127), exactly. That float has the format's exponent in the low bits of
// its exponent field and format subnormals are float32 subnormals (so FTZ must be off): shifted left by
// 8 - E, the code sits under the sign bit, where x's sign goes. Neither step is a multiply: Zen 5 takes
// a slow path for a vmulps with a subnormal result, but not for fma or sub.

/// The float32 bits of 2^(bias - 127), of the format's smallest normal 2^(1 - bias), and what turns the
/// bits of c into those of q.
template <class S>
constexpr std::uint32_t scale_bits = std::uint32_t(S::bias) << 23;
template <class S>
constexpr std::uint32_t min_normal_bits = std::uint32_t(128 - S::bias) << 23;
template <class S>
constexpr std::int32_t magic_offset = (S::bias - 127 + 23 - S::man_bits) * (1 << 23) + 0x400000;

/// The float32 exponent field of the format's all-ones exponent.
template <class S>
constexpr std::uint32_t top_exp = (1u << S::exp_bits) - 1 - S::bias + 127;

/// a rounded to the format, times 2^(bias - 127) (q as above).
template <class S>
[[gnu::always_inline]] inline __m512 round_scaled(__m512 a, __m512 q) {
    const __m512 y = _mm512_fmadd_round_ps(a, splat_bits(scale_bits<S>), q, round_exact);
    return _mm512_sub_round_ps(y, q, round_exact);
}

/// The code of round_scaled's w with the sign of x in each lane's top S::width bits (the bits below are
/// left over).
template <class S>
[[gnu::always_inline]] inline __m512i code_top(__m512 w, __m512 x) {
    const __m512i code = _mm512_slli_epi32(_mm512_castps_si512(w), 8 - S::exp_bits);
    return _mm512_ternarylogic_epi32(code, _mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u)), 0xd8);
}

/// code_top of any input: |x| is first clamped so that everything past the largest finite encodes as
/// overflow asks (infinity, e4m3's NaN, or the largest finite), and NaN stays NaN; c comes from integer
/// operations.
template <class S, bool Saturate>
[[gnu::always_inline]] inline __m512i encode_any(__m512 x) {
    constexpr auto largest = std::bit_cast<std::uint32_t>(decode<S>(static_cast<typename S::storage>(S::max_code)));
    const __m512 ax = _mm512_abs_ps(x);
    __m512 a;
    if constexpr (S::has_inf) {
        // 2^(emax + 1) encodes as infinity. minps returns its second operand when either is a NaN, so NaN
        // passes (the fma quiets it and keeps the top of its payload).
        a = _mm512_min_ps(splat_bits(Saturate ? largest : top_exp<S> << 23), ax);
    } else {
        // S.1111.111's magnitude (480 for e4m3) encodes as the NaN; minps turns NaN into it too.
        const __m512 nan_value = splat_bits((top_exp<S> << 23) | (S::man_mask << (23 - S::man_bits)));
        a = _mm512_min_ps(Saturate ? _mm512_min_ps(splat_bits(largest), ax) : ax, nan_value);
    }
    const __m512i c = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7f800000)),
                                       _mm512_set1_epi32(int(min_normal_bits<S>)));
    const __m512 q = _mm512_castsi512_ps(_mm512_add_epi32(c, _mm512_set1_epi32(magic_offset<S>)));
    return code_top<S>(round_scaled<S>(a, q), x);
}

/// Word and byte indices for the permutes.
template <class T, int N, class F>
constexpr std::array<T, N> make_index(F f) {
    std::array<T, N> a{};
    for (int i = 0; i < N; ++i) a[i] = static_cast<T>(f(i));
    return a;
}
/// The high word of every dword of two vectors.
alignas(64) constexpr auto high_words = make_index<std::uint16_t, 32>([](int i) { return 2 * i + 1; });
/// The top byte of every dword of two vectors (the upper 32 bytes repeat the lower).
alignas(64) constexpr auto top_bytes = make_index<std::uint8_t, 64>([](int i) { return 4 * (i % 32) + 3; });
/// vpmultishiftqb controls copying each dword's bits 23..30, x's exponent field E, into all its bytes.
alignas(64) constexpr auto exponent_bytes = make_index<std::uint8_t, 64>([](int i) { return i % 8 < 4 ? 23 : 55; });

__m512i load_index(const void* p) { return _mm512_load_si512(p); }

/// The fast path looks q up instead of computing it: the high word of q by E mod 64 (vpermi2w, 64 words;
/// q's low word is zero), over the 64 exponents E from that of half the smallest subnormal, below which
/// everything rounds to zero (so any q at least the smallest one does). Smaller exponents land on larger
/// q's and round to zero too; larger ones land anywhere, and encode_128 checks for those.
///
/// Without saturation the check looks at the results: every exponent bit above the format's must be
/// clear. For that, infinity's binade [2^(emax+1), 2^(emax+2)) rounds in steps of 2^(emax+1), giving
/// infinity or an exponent past the format's; and entries whose exponent plus 64 would be a finite value
/// past the table (cbfloat16's [2^24, 2^33)) are NaN, which makes such lanes, and the few tiny ones
/// sharing the entry, fail the check.
template <class S, bool Saturate>
struct magic_table {
    static constexpr int first = 127 - S::bias - S::man_bits;
    alignas(64) std::uint16_t high[64];
    constexpr magic_table() : high{} {
        for (int e = first; e < first + 64; ++e) {
            int binade = std::max(e, 128 - S::bias);
            if (!Saturate && S::has_inf && e == int(top_exp<S>)) binade += S::man_bits;
            std::uint32_t q = (std::uint32_t(binade) << 23) + std::uint32_t(magic_offset<S>);
            if (!Saturate && e + 64 <= int(top_exp<S>)) q = 0x7fc00000;
            high[e % 64] = static_cast<std::uint16_t>(q >> 16);
        }
    }
};
template <class S, bool Saturate>
constexpr magic_table<S, Saturate> magic_tables{};

/// With saturation: the first exponent field the table path cannot take (past the table; the top binade,
/// which may round past the largest finite, or for e4m3 the binade holding its NaN code; infinity, NaN).
template <class S>
constexpr std::uint32_t first_unsafe_exponent = std::min<std::uint32_t>(magic_table<S, true>::first + 64,
                                                                        top_exp<S> - (S::has_inf ? 1 : 0));

/// 128 floats -> eight vectors of code_top results by the table path; a block that fails the check is
/// redone with encode_any.
template <class S, bool Saturate>
[[gnu::target("avx512vbmi"), gnu::always_inline]] inline void encode_128(const float* src, __m512i (&r)[8]) {
    const __m512i windows = load_index(exponent_bytes.data());
    const __m512i table0 = _mm512_load_si512(magic_tables<S, Saturate>.high);
    const __m512i table1 = _mm512_load_si512(magic_tables<S, Saturate>.high + 32);
    __m512 x[8], w[8];
    __m512i seen = _mm512_setzero_si512();
    for (int k = 0; k < 8; ++k) {
        x[k] = _mm512_loadu_ps(src + 16 * k);
        const __m512i e = _mm512_multishift_epi64_epi8(windows, _mm512_castps_si512(x[k]));
        w[k] = round_scaled<S>(x[k], _mm512_castsi512_ps(_mm512_permutex2var_epi16(table0, e, table1)));
        if constexpr (!Saturate) {
            if (k % 2 == 1) // seen |= w[k - 1] | w[k]
                seen = _mm512_ternarylogic_epi32(seen, _mm512_castps_si512(w[k - 1]), _mm512_castps_si512(w[k]), 0xfe);
        } else {
            seen = k == 0 ? e : _mm512_max_epu32(seen, e);
        }
        r[k] = code_top<S>(w[k], x[k]);
    }
    // The float32 exponent bits above the format's.
    constexpr std::uint32_t past_format = 0x7f800000u & ~(((1u << S::exp_bits) - 1) << 23);
    const bool unsafe =
        !Saturate ? _mm512_test_epi32_mask(seen, _mm512_set1_epi32(int(past_format))) != 0
                  : _mm512_cmpge_epu32_mask(seen, _mm512_set1_epi32(int(first_unsafe_exponent<S> * 0x01010101u))) != 0;
    if (unsafe) [[unlikely]]
        for (int k = 0; k < 8; ++k) r[k] = encode_any<S, Saturate>(x[k]);
}

/// Up to 64 floats at the end (m: their mask) -> four vectors of encode_any results.
template <class S, bool Saturate>
[[gnu::always_inline]] inline void encode_tail(const float* src, __mmask64 m, __m512i (&r)[4]) {
    for (int k = 0; k < 4; ++k)
        r[k] = encode_any<S, Saturate>(_mm512_maskz_loadu_ps(__mmask16(m >> (16 * k)), src + 16 * k));
}

/// How the code_top results of 64 floats (four vectors) are stored as cbfloat16: vpermt2w packs the
/// high words of two vectors. m says which of the 64 are stored.
struct cbf16_codes {
    using storage = std::uint16_t;
    static constexpr const auto& index = high_words;
    [[gnu::target("avx512vbmi"), gnu::always_inline]] static void store(storage* out, __m512i pick, const __m512i* r,
                                                                        __mmask64 m) {
        const __m512i low = _mm512_permutex2var_epi16(r[0], pick, r[1]),
                      high = _mm512_permutex2var_epi16(r[2], pick, r[3]);
        if (m == ~__mmask64(0)) {
            _mm512_storeu_si512(out, low);
            _mm512_storeu_si512(out + 32, high);
        } else {
            _mm512_mask_storeu_epi16(out, __mmask32(m), low);
            _mm512_mask_storeu_epi16(out + 32, __mmask32(m >> 32), high);
        }
    }
};

/// The same for an FP8 format: the top bytes of the lanes of the four vectors, in order.
struct fp8_codes {
    using storage = std::uint8_t;
    static constexpr const auto& index = top_bytes;
    [[gnu::target("avx512vbmi"), gnu::always_inline]] static void store(storage* out, __m512i pick, const __m512i* r,
                                                                        __mmask64 m) {
        const __m512i ab = _mm512_permutex2var_epi8(r[0], pick, r[1]), cd = _mm512_permutex2var_epi8(r[2], pick, r[3]);
        const __m512i codes = _mm512_inserti64x4(ab, _mm512_castsi512_si256(cd), 1);
        if (m == ~__mmask64(0))
            _mm512_storeu_si512(out, codes);
        else
            _mm512_mask_storeu_epi8(out, m, codes);
    }
};

/// float32 -> format S: the table path over blocks of 128 floats, encode_any for the last (up to 127);
/// Codes stores them.
template <class S, class Codes, bool Saturate>
[[gnu::target("avx512vbmi"), gnu::noinline]] void narrow_codes_kernel(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<typename Codes::storage*>(dst);
    const __m512i pick = load_index(Codes::index.data());
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m512i r[8];
        encode_128<S, Saturate>(src + i, r);
        Codes::store(out + i, pick, r, ~__mmask64(0));
        Codes::store(out + i + 64, pick, r + 4, ~__mmask64(0));
    }
    for (; i < n; i += 64) {
        const std::size_t left = std::min<std::size_t>(64, n - i);
        const __mmask64 m = left == 64 ? ~__mmask64(0) : (__mmask64(1) << left) - 1;
        __m512i r[4];
        encode_tail<S, Saturate>(src + i, m, r);
        Codes::store(out + i, pick, r, m);
    }
}

/// Code j of 32 into the high word of lane j: lanes 0..15 and 16..31 (the low words are zeroed by mask).
alignas(64) constexpr auto spread_low = make_index<std::uint16_t, 32>([](int i) { return i / 2; });
alignas(64) constexpr auto spread_high = make_index<std::uint16_t, 32>([](int i) { return 16 + i / 2; });

/// cbfloat16 -> float32 with t = code << 16 in each lane: t shifted right by two with its sign kept,
/// the two copies of the sign cleared, is the float32 whose exponent and mantissa fields hold the
/// code's (subnormals included, hence DAZ must be off); times 2^(127 - bias) that is the value, exactly.
/// Wrong only for the all-ones exponent (infinity, NaN): see cbf16_specials.
__m512 cbf16_lanes(__m512i t) {
    using S = cbfloat16::spec;
    const __m512i w = _mm512_and_si512(_mm512_srai_epi32(t, 2), _mm512_set1_epi32(int(0x9fffffffu)));
    // An fma, not a multiply: Zen 5 takes a slow path for vmulps on a subnormal. The -0 addend keeps -0.
    return _mm512_fmadd_round_ps(_mm512_castsi512_ps(w), splat_bits(std::uint32_t(254 - S::bias) << 23),
                                 _mm512_set1_ps(-0.0f), round_exact);
}

/// Infinity and NaN lanes of cbf16_lanes: float32's all-ones exponent, the code's mantissa on top of
/// float32's, and the quiet bit for a NaN, as decode<cbfloat16> gives them.
__m512 cbf16_specials(__m512i t, __m512 x) {
    const __m512i exp = _mm512_set1_epi32(0x7e000000);
    const __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_and_si512(t, exp), exp);
    const __mmask16 nan = _mm512_mask_test_epi32_mask(special, t, _mm512_set1_epi32(0x01ff0000));
    __m512i r = _mm512_or_si512(_mm512_srai_epi32(t, 2), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, r, _mm512_set1_epi32(0x400000));
    return _mm512_mask_mov_ps(x, special, _mm512_castsi512_ps(r));
}

[[gnu::noinline]] void widen_cbf16_kernel(const void* src, float* dst, std::size_t n) {
    const auto* in = static_cast<const std::uint16_t*>(src);
    const __m512i low_half = load_index(spread_low.data()), high_half = load_index(spread_high.data());
    const auto convert = [&](__m512i h, float* out, __mmask32 m) {
        const __m512i t0 = _mm512_maskz_permutexvar_epi16(0xaaaaaaaa, low_half, h);
        const __m512i t1 = _mm512_maskz_permutexvar_epi16(0xaaaaaaaa, high_half, h);
        __m512 x0 = cbf16_lanes(t0), x1 = cbf16_lanes(t1);
        const __m512i exp = _mm512_set1_epi16(0x7e00);
        if (_mm512_cmpeq_epi16_mask(_mm512_and_si512(h, exp), exp) != 0) [[unlikely]] {
            x0 = cbf16_specials(t0, x0);
            x1 = cbf16_specials(t1, x1);
        }
        if (m == ~__mmask32(0)) {
            _mm512_storeu_ps(out, x0);
            _mm512_storeu_ps(out + 16, x1);
        } else {
            _mm512_mask_storeu_ps(out, __mmask16(m), x0);
            _mm512_mask_storeu_ps(out + 16, __mmask16(m >> 16), x1);
        }
    };
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) convert(_mm512_loadu_si512(in + i), dst + i, ~__mmask32(0));
    if (i < n) {
        const __mmask32 m = (__mmask32(1) << (n - i)) - 1;
        convert(_mm512_maskz_loadu_epi16(m, in + i), dst + i, m);
    }
}

/// Every float8_e4m3 value is a bfloat16 value: its float32 bits have 16 low zero bits, and the two high
/// bytes depend on the code's low 7 bits only, but for the sign. One byte table for each.
struct e4m3_byte_tables {
    alignas(64) std::uint8_t high[128];
    alignas(64) std::uint8_t low[128];
};
constexpr std::uint32_t e4m3_value_bits(int code) {
    return std::bit_cast<std::uint32_t>(float(float8_e4m3::from_bits(static_cast<std::uint8_t>(code))));
}
static_assert([] {
    for (int i = 0; i < 256; ++i)
        if ((e4m3_value_bits(i) & 0xffff) != 0 || (e4m3_value_bits(i) ^ e4m3_value_bits(i & 0x7f)) != (i & 0x80u) << 24)
            return false;
    return true;
}());
constexpr e4m3_byte_tables e4m3_bytes = [] {
    e4m3_byte_tables t{};
    for (int i = 0; i < 128; ++i) {
        t.high[i] = static_cast<std::uint8_t>(e4m3_value_bits(i) >> 24);
        t.low[i] = static_cast<std::uint8_t>(e4m3_value_bits(i) >> 16);
    }
    return t;
}();

/// Dword g of 16 takes dword 4 (g % 4) + g / 4: the unpacks below interleave within 128-bit lanes, and
/// this 4x4 transpose makes their four results come out as elements 0..15, 16..31, 32..47, 48..63.
alignas(64) constexpr auto transpose_4x4 = make_index<std::uint32_t, 16>([](int g) { return 4 * (g % 4) + g / 4; });

/// float8_e4m3 -> float32, 64 codes: two vpermt2b lookups (128 entries: index bits 0..6) give the two
/// high bytes, the code's sign goes into the top one, and two rounds of unpacks make dwords of them.
[[gnu::target("avx512vbmi"), gnu::always_inline]] inline void e4m3_to_f32(__m512i b, float* out, __mmask64 m) {
    const __m512i high0 = _mm512_load_si512(e4m3_bytes.high), high1 = _mm512_load_si512(e4m3_bytes.high + 64);
    const __m512i low0 = _mm512_load_si512(e4m3_bytes.low), low1 = _mm512_load_si512(e4m3_bytes.low + 64);
    b = _mm512_permutexvar_epi32(load_index(transpose_4x4.data()), b);
    const __m512i low = _mm512_permutex2var_epi8(low0, b, low1);
    const __m512i high = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(high0, b, high1), b,
                                                   _mm512_set1_epi8(int8_t(0x80)), 0xd8); // sign of the code
    const __m512i words0 = _mm512_unpacklo_epi8(low, high), words1 = _mm512_unpackhi_epi8(low, high);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i x[4] = {_mm512_unpacklo_epi16(zero, words0), _mm512_unpackhi_epi16(zero, words0),
                          _mm512_unpacklo_epi16(zero, words1), _mm512_unpackhi_epi16(zero, words1)};
    for (int k = 0; k < 4; ++k) {
        if (m == ~__mmask64(0))
            _mm512_storeu_si512(out + 16 * k, x[k]);
        else
            _mm512_mask_storeu_epi32(out + 16 * k, __mmask16(m >> (16 * k)), x[k]);
    }
}

[[gnu::target("avx512vbmi"), gnu::noinline]] void widen_e4m3_kernel(const void* src, float* dst, std::size_t n) {
    const auto* in = static_cast<const std::uint8_t*>(src);
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) e4m3_to_f32(_mm512_loadu_si512(in + i), dst + i, ~__mmask64(0));
    if (i < n) {
        const __mmask64 m = (__mmask64(1) << (n - i)) - 1;
        e4m3_to_f32(_mm512_maskz_loadu_epi8(m, in + i), dst + i, m);
    }
}

/// vcvtneps2bf16 rounds like encode<bfloat16> except that it flushes float32 subnormal inputs to zero.
/// Lanes holding a subnormal are redone with integer rounding: (a + 0x7fff + lsb) >> 16.
[[gnu::target("avx512bf16")]] __m256i bf16_from(__m512 v) {
    __m256i r = (__m256i)_mm512_cvtneps_pbh(v);
    const __mmask16 sub = _mm512_fpclass_ps_mask(v, 0x20); // 0x20: denormal
    if (sub != 0) [[unlikely]] {
        const __m512i x = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
        const __m512i rounded =
            _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
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
        k.widen[static_cast<int>(Dtype::cbfloat16)] = keep_subnormals<widen_cbf16_kernel>;
        k.widen[static_cast<int>(Dtype::float8_e5m2)] = widen_e5m2;
        k.widen[static_cast<int>(Dtype::float8_e4m3)] = widen_e4m3;
        k.narrow[static_cast<int>(Dtype::cbfloat16)] = narrow_16<cbfloat16, false>;
        k.narrow_saturate[static_cast<int>(Dtype::cbfloat16)] = narrow_16<cbfloat16, true>;
        k.narrow[static_cast<int>(Dtype::float8_e4m3)] = narrow_16<float8_e4m3, false>;
        k.narrow[static_cast<int>(Dtype::float8_e5m2)] = narrow_16<float8_e5m2, false>;
        k.narrow_saturate[static_cast<int>(Dtype::float8_e4m3)] = narrow_16<float8_e4m3, true>;
        k.narrow_saturate[static_cast<int>(Dtype::float8_e5m2)] = narrow_16<float8_e5m2, true>;
        return k;
    }();
    return table;
}

const convert_kernels& avx512_bf16_kernels() {
    static const convert_kernels table = [] {
        convert_kernels k = avx512_kernels();
        // bf16_from finds float32 subnormals with vfpclassps, which sees zeros when DAZ is set.
        k.narrow[static_cast<int>(Dtype::bfloat16)] = keep_subnormals<narrow_bf16>;
        if (cpu_has_avx512_vbmi()) {
            using cbf16 = cbfloat16::spec;
            using e4m3 = float8_e4m3::spec;
            using e5m2 = float8_e5m2::spec;
            k.narrow[static_cast<int>(Dtype::cbfloat16)] =
                keep_subnormals<narrow_codes_kernel<cbf16, cbf16_codes, false>>;
            k.narrow_saturate[static_cast<int>(Dtype::cbfloat16)] =
                keep_subnormals<narrow_codes_kernel<cbf16, cbf16_codes, true>>;
            k.narrow[static_cast<int>(Dtype::float8_e4m3)] =
                keep_subnormals<narrow_codes_kernel<e4m3, fp8_codes, false>>;
            k.narrow[static_cast<int>(Dtype::float8_e5m2)] =
                keep_subnormals<narrow_codes_kernel<e5m2, fp8_codes, false>>;
            k.narrow_saturate[static_cast<int>(Dtype::float8_e4m3)] =
                keep_subnormals<narrow_codes_kernel<e4m3, fp8_codes, true>>;
            k.narrow_saturate[static_cast<int>(Dtype::float8_e5m2)] =
                keep_subnormals<narrow_codes_kernel<e5m2, fp8_codes, true>>;
            k.widen[static_cast<int>(Dtype::float8_e4m3)] = widen_e4m3_kernel;
        }
        return k;
    }();
    return table;
}

} // namespace mixprec::autodiff::detail
