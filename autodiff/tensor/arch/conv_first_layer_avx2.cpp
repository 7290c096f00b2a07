// A first layer's forward pass with AVX2 (conv_first_layer.hpp), 8 lanes: the passes of
// conv_first_layer_images.hpp on __m256, the AVX-512 pass's arithmetic lane for lane (the same FMAs in the same
// order, the same roundings), so both give the same bits. Compiled with -mavx2 -mf16c -mfma; runs only at the
// avx2 level.
#include <mixprec/autodiff/tensor/detail/conv_first_layer_images.hpp>

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mixprec::autodiff::detail {
namespace {

/// 8 floats, and masks of the first lanes as vectors (all ones in a lane that is in), as AVX2's masked loads
/// and stores take them.
struct floats8 {
    static constexpr std::size_t lanes = 8;
    using floats = __m256;
    using offsets = __m256i;
    static __m256i first(std::size_t n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static __m256 load(const float* p, __m256i m) { return _mm256_maskload_ps(p, m); }
    static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, __m256i m, __m256 v) { _mm256_maskstore_ps(p, m, v); }
    static __m256 zero() { return _mm256_setzero_ps(); }
    static __m256 all(float c) { return _mm256_set1_ps(c); }
    static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
    static __m256 fmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
    /// ReLU as mixprec applies it: v where v > 0 or NaN, else +0.
    static __m256 relu(__m256 v) {
        const __m256 keep =
            _mm256_or_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        return _mm256_and_ps(keep, v);
    }
    static __m256i no_offset() { return _mm256_setzero_si256(); }
    /// v and its offset in place of best and its own where v is larger, or the first NaN.
    static void keep_larger(__m256& best, __m256i& offset, __m256 v, std::int32_t at) {
        const __m256 replaces =
            _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                         _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(best, best, _CMP_ORD_Q)));
        best = _mm256_blendv_ps(best, v, replaces);
        offset = _mm256_blendv_epi8(offset, _mm256_set1_epi32(at), _mm256_castps_si256(replaces));
    }
    /// Whether a lane of a, b, c or d is NaN.
    static bool any_nan(__m256 a, __m256 b, __m256 c, __m256 d) {
        return _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(c, d, _CMP_UNORD_Q))) !=
               0;
    }
    /// keep_larger where neither is NaN: v and its offset where v > best.
    static void keep_greater(__m256& best, __m256i& offset, __m256 v, std::int32_t at) {
        const __m256 replaces = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
        best = _mm256_blendv_ps(best, v, replaces);
        offset = _mm256_blendv_epi8(offset, _mm256_set1_epi32(at), _mm256_castps_si256(replaces));
    }
    /// The ReLU of a maximum that is not NaN, and its offset 0 where it is clamped.
    static void relu_kept(__m256& best, __m256i& offset) {
        const __m256 positive = _mm256_cmp_ps(best, _mm256_setzero_ps(), _CMP_GT_OQ);
        best = _mm256_and_ps(positive, best);
        offset = _mm256_and_si256(_mm256_castps_si256(positive), offset);
    }
    /// start + 2·lane + offset, each lane's argmax in the convolution's output.
    static void store_indices(std::uint32_t* p, __m256i m, std::int32_t start, __m256i offset) {
        const __m256i twice = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        _mm256_maskstore_epi32(reinterpret_cast<int*>(p), m,
                               _mm256_add_epi32(_mm256_add_epi32(_mm256_set1_epi32(start), twice), offset));
    }
};

/// Stores the first `count` of 8 16-bit codes at `at`.
void store_codes(std::uint16_t* at, std::size_t count, __m128i codes) {
    if (count == floats8::lanes) return _mm_storeu_si128(reinterpret_cast<__m128i*>(at), codes);
    alignas(16) std::uint16_t all[floats8::lanes];
    _mm_store_si128(reinterpret_cast<__m128i*>(all), codes);
    std::memcpy(at, all, count * sizeof(std::uint16_t));
}

/// The pooled pass's outputs as float32 holds them (stored as they are).
struct as_float32 {
    using storage = float;
    static __m256 rounded(__m256 v) { return v; }
    static void store(float* at, std::size_t, __m256i valid, __m256 v) { _mm256_maskstore_ps(at, valid, v); }
};

/// As float16 holds them: rounded to nearest even by the conversion instruction (the bits of the AVX-512
/// pass), overflow to infinity, a NaN quieted with its high payload kept; stored as float16 bits.
struct as_float16 {
    using storage = std::uint16_t;
    static constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    static __m256 rounded(__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, nearest)); }
    static void store(std::uint16_t* at, std::size_t count, __m256i, __m256 v) {
        store_codes(at, count, _mm256_cvtps_ph(v, nearest)); // exact: v is rounded already
    }
};

/// As bfloat16 holds them: round_trip<bfloat16::spec>'s three integer steps (format.hpp) on 8 lanes; stored
/// as the high halves.
struct as_bfloat16 {
    using storage = std::uint16_t;
    static __m256 rounded(__m256 v) {
        const __m256i x = _mm256_castps_si256(v), high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
        const __m256i nearest =
            _mm256_and_si256(_mm256_add_epi32(x, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), high);
        const __m256i nan = _mm256_and_si256(_mm256_or_si256(x, _mm256_set1_epi32(0x400000)), high);
        return _mm256_blendv_ps(_mm256_castsi256_ps(nearest), _mm256_castsi256_ps(nan),
                                _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    static void store(std::uint16_t* at, std::size_t count, __m256i, __m256 v) {
        const __m256i halves = _mm256_srli_epi32(_mm256_castps_si256(v), 16); // 8 codes in 32-bit lanes
        const __m256i packed = _mm256_packus_epi32(halves, halves);           // lanes 0-3 0-3 4-7 4-7
        store_codes(at, count, _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0b1000))); // 0-3 4-7
    }
};

} // namespace

void first_layer_forward_avx2(const first_layer_shape& s, const float* x, const float* w, const float* bias, float* y) {
    forward_images<floats8>(s, x, w, bias, y);
}

void first_layer_pooled_avx2(const first_layer_shape& s, const float* x, const float* w, const float* bias, bool relu,
                             Dtype dtype, void* pooled, std::uint32_t* idx) {
    pooled_images<floats8, as_float32, as_float16, as_bfloat16>(s, x, w, bias, relu, dtype, pooled, idx);
}

} // namespace mixprec::autodiff::detail
