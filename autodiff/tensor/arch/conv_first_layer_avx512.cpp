// A first layer's forward pass on AVX-512 (conv_first_layer.hpp), 16 lanes: the passes of
// conv_first_layer_images.hpp on __m512. Compiled with the AVX-512 flags; runs only from the avx512 level up.
#include <mixprec/autodiff/tensor/detail/conv_first_layer_images.hpp>

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace mixprec::autodiff::detail {
namespace {

/// 16 floats, and masks of the first lanes in a mask register.
struct floats16 {
    static constexpr std::size_t lanes = 16;
    using floats = __m512;
    using offsets = __m512i;
    static __mmask16 first(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
    static __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
    static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
    static __m512 zero() { return _mm512_setzero_ps(); }
    static __m512 all(float c) { return _mm512_set1_ps(c); }
    static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
    static __m512 fmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
    /// ReLU as mixprec applies it: v where v > 0 or NaN, else +0.
    static __m512 relu(__m512 v) {
        const __mmask16 keep =
            _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        return _mm512_maskz_mov_ps(keep, v);
    }
    static __m512i no_offset() { return _mm512_setzero_si512(); }
    /// v and its offset in place of best and its own where v is larger, or the first NaN.
    static void keep_larger(__m512& best, __m512i& offset, __m512 v, std::int32_t at) {
        const __mmask16 replaces =
            _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
            (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
        best = _mm512_mask_mov_ps(best, replaces, v);
        offset = _mm512_mask_mov_epi32(offset, replaces, _mm512_set1_epi32(at));
    }
    /// Whether a lane of a, b, c or d is NaN.
    static bool any_nan(__m512 a, __m512 b, __m512 c, __m512 d) {
        return (_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c, d, _CMP_UNORD_Q)) != 0;
    }
    /// keep_larger where neither is NaN: v and its offset where v > best.
    static void keep_greater(__m512& best, __m512i& offset, __m512 v, std::int32_t at) {
        const __mmask16 replaces = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, replaces, v);
        offset = _mm512_mask_mov_epi32(offset, replaces, _mm512_set1_epi32(at));
    }
    /// The ReLU of a maximum that is not NaN, and its offset 0 where it is clamped.
    static void relu_kept(__m512& best, __m512i& offset) {
        const __mmask16 positive = _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_GT_OQ);
        best = _mm512_maskz_mov_ps(positive, best);
        offset = _mm512_maskz_mov_epi32(positive, offset);
    }
    /// start + 2·lane + offset, each lane's argmax in the convolution's output.
    static void store_indices(std::uint32_t* p, __mmask16 m, std::int32_t start, __m512i offset) {
        const __m512i twice = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        _mm512_mask_storeu_epi32(p, m, _mm512_add_epi32(_mm512_add_epi32(_mm512_set1_epi32(start), twice), offset));
    }
};

/// The pooled pass's outputs as float32 holds them (stored as they are).
struct as_float32 {
    using storage = float;
    static __m512 rounded(__m512 v) { return v; }
    static void store(float* at, std::size_t, __mmask16 valid, __m512 v) { _mm512_mask_storeu_ps(at, valid, v); }
};

/// As float16 holds them: rounded to nearest even by the conversion instruction (the bits of narrow() at
/// the avx512 level, and of encode(): test_formats.cpp), overflow to infinity, a NaN quieted with its high
/// payload kept; stored as float16 bits.
struct as_float16 {
    using storage = std::uint16_t;
    static constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    static __m512 rounded(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, nearest)); }
    static void store(std::uint16_t* at, std::size_t, __mmask16 valid, __m512 v) {
        _mm256_mask_storeu_epi16(at, valid, _mm512_cvtps_ph(v, nearest)); // exact: v is rounded already
    }
};

/// As bfloat16 holds them: round_trip<bfloat16::spec>'s three integer steps (format.hpp) on 16 lanes;
/// stored as the high halves.
struct as_bfloat16 {
    using storage = std::uint16_t;
    static __m512 rounded(__m512 v) {
        const __m512i x = _mm512_castps_si512(v), high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
        const __m512i nearest =
            _mm512_and_si512(_mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), high);
        const __m512i nan = _mm512_and_si512(_mm512_or_si512(x, _mm512_set1_epi32(0x400000)), high);
        return _mm512_castsi512_ps(_mm512_mask_mov_epi32(nearest, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan));
    }
    static void store(std::uint16_t* at, std::size_t, __mmask16 valid, __m512 v) {
        _mm256_mask_storeu_epi16(at, valid, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
    }
};

} // namespace

void first_layer_forward_avx512(const first_layer_shape& s, const float* x, const float* w, const float* bias,
                                float* y) {
    forward_images<floats16>(s, x, w, bias, y);
}

void first_layer_pooled_avx512(const first_layer_shape& s, const float* x, const float* w, const float* bias, bool relu,
                               Dtype dtype, void* pooled, std::uint32_t* idx) {
    pooled_images<floats16, as_float32, as_float16, as_bfloat16>(s, x, w, bias, relu, dtype, pooled, idx);
}

} // namespace mixprec::autodiff::detail
