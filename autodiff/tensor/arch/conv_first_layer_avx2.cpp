// A first layer's forward pass with AVX2 (conv_first_layer.hpp), 8 lanes: the AVX-512 pass's arithmetic lane
// for lane (the same FMAs in the same order, the same roundings), so both give the same bits. Compiled with
// -mavx2 -mf16c -mfma; runs only at the avx2 level.
#include <mixprec/autodiff/tensor/detail/conv_first_layer_images.hpp>

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mixprec::autodiff::detail {
namespace {

constexpr std::size_t lanes = 8;

/// The first n lanes (n ≤ 8) of a vector, as a mask of AVX2's masked loads and stores.
__m256i first(std::size_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// ReLU as mixprec applies it: v where v > 0 or NaN, else +0.
__m256 relu(__m256 v) {
    const __m256 keep =
        _mm256_or_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_and_ps(keep, v);
}

/// The sum plus the bias when there is one (no add otherwise: -0 stays -0, as in oneDNN's kernel).
__m256 with_bias(__m256 sum, const float* bias, std::size_t o) {
    return bias ? _mm256_add_ps(sum, _mm256_set1_ps(bias[o])) : sum;
}

void forward_image(const first_layer_shape& s, const float* x, const float* w, const float* bias, float* y) {
    const std::size_t ho = s.h - 2, wo = s.w - 2, plane = ho * wo;
    for (std::size_t r = 0; r < ho; ++r)
        for (std::size_t j = 0; j < wo; j += lanes) {
            const __m256i valid = first(std::min(lanes, wo - j)); // masked loads stay inside the rows
            __m256 in[taps];
#pragma GCC unroll 9
            for (std::size_t t = 0; t < taps; ++t) in[t] = _mm256_maskload_ps(x + (r + t / 3) * s.w + j + t % 3, valid);
            for (std::size_t o0 = 0; o0 < s.o; o0 += group) {
                const filter_group g(w, o0, s.o);
                __m256 sum[group];
                for (auto& v : sum) v = _mm256_setzero_ps();
#pragma GCC unroll 9
                for (std::size_t t = 0; t < taps; ++t)
#pragma GCC unroll 4
                    for (std::size_t f = 0; f < group; ++f)
                        sum[f] = _mm256_fmadd_ps(in[t], _mm256_set1_ps(g.w[f][t]), sum[f]);
#pragma GCC unroll 4
                for (std::size_t f = 0; f < group; ++f) {
                    if (o0 + f == s.o) break;
                    _mm256_maskstore_ps(y + (o0 + f) * plane + r * wo + j, valid, with_bias(sum[f], bias, o0 + f));
                }
            }
        }
}

/// Stores the first `count` of 8 16-bit codes at `at`.
void store_codes(std::uint16_t* at, std::size_t count, __m128i codes) {
    if (count == lanes) return _mm_storeu_si128(reinterpret_cast<__m128i*>(at), codes);
    alignas(16) std::uint16_t all[lanes];
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

/// One image's pooled pass, each output through the ReLU (when applied) and rounded as Out holds it before
/// the max: the values and the argmax conv2d's rounded output gives max_pool2d.
template <class Out>
void pooled_image(const first_layer_shape& s, const float* split, std::size_t span, const float* w, const float* bias,
                  bool relu_applied, std::uint32_t base, typename Out::storage* pooled, std::uint32_t* idx) {
    const std::size_t ho = s.h - 2, wo = s.w - 2, ho2 = ho / 2, wo2 = wo / 2, windows = ho2 * wo2;
    const auto row = static_cast<std::int32_t>(wo);
    const __m256i lane = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14); // 2·lane
    for (std::size_t i = 0; i < ho2; ++i)
        for (std::size_t k = 0; k < wo2; k += lanes) {
            const std::size_t count = std::min(lanes, wo2 - k);
            const __m256i valid = first(count);
            __m256 in[4][4]; // rows 2i + a, columns 2(k + lane) + b
#pragma GCC unroll 4
            for (std::size_t a = 0; a < 4; ++a)
#pragma GCC unroll 4
                for (std::size_t b = 0; b < 4; ++b)
                    in[a][b] = _mm256_loadu_ps(split + ((2 * i + a) * 2 + b % 2) * span + k + b / 2);
            for (std::size_t o0 = 0; o0 < s.o; o0 += group) {
                const filter_group g(w, o0, s.o);
                __m256 sum[group][4]; // the window's outputs (0, 0), (0, 1), (1, 0), (1, 1)
                for (auto& f : sum)
                    for (auto& v : f) v = _mm256_setzero_ps();
#pragma GCC unroll 9
                for (std::size_t t = 0; t < taps; ++t) {
                    const std::size_t p = t / 3, q = t % 3;
#pragma GCC unroll 4
                    for (std::size_t f = 0; f < group; ++f) {
                        const __m256 wt = _mm256_set1_ps(g.w[f][t]);
                        sum[f][0] = _mm256_fmadd_ps(in[p][q], wt, sum[f][0]);
                        sum[f][1] = _mm256_fmadd_ps(in[p][q + 1], wt, sum[f][1]);
                        sum[f][2] = _mm256_fmadd_ps(in[p + 1][q], wt, sum[f][2]);
                        sum[f][3] = _mm256_fmadd_ps(in[p + 1][q + 1], wt, sum[f][3]);
                    }
                }
#pragma GCC unroll 4
                for (std::size_t f = 0; f < group; ++f) {
                    const std::size_t o = o0 + f;
                    if (o == s.o) break;
                    __m256 v[4];
#pragma GCC unroll 4
                    for (std::size_t e = 0; e < 4; ++e) {
                        v[e] = with_bias(sum[f][e], bias, o);
                        if (relu_applied) v[e] = relu(v[e]);
                        v[e] = Out::rounded(v[e]);
                    }
                    __m256 best = v[0];
                    __m256i offset = _mm256_setzero_si256();
                    const std::int32_t offsets[4] = {0, 1, row, row + 1};
#pragma GCC unroll 3
                    for (std::size_t e = 1; e < 4; ++e) {
                        const __m256 replaces = _mm256_or_ps(_mm256_cmp_ps(v[e], best, _CMP_GT_OQ),
                                                             _mm256_and_ps(_mm256_cmp_ps(v[e], v[e], _CMP_UNORD_Q),
                                                                           _mm256_cmp_ps(best, best, _CMP_ORD_Q)));
                        best = _mm256_blendv_ps(best, v[e], replaces);
                        offset =
                            _mm256_blendv_epi8(offset, _mm256_set1_epi32(offsets[e]), _mm256_castps_si256(replaces));
                    }
                    const auto start = static_cast<std::int32_t>(base + o * ho * wo + 2 * i * wo + 2 * k);
                    const __m256i at = _mm256_add_epi32(_mm256_add_epi32(_mm256_set1_epi32(start), lane), offset);
                    Out::store(pooled + o * windows + i * wo2 + k, count, valid, best);
                    _mm256_maskstore_epi32(reinterpret_cast<int*>(idx + o * windows + i * wo2 + k), valid, at);
                }
            }
        }
}

} // namespace

void first_layer_forward_avx2(const first_layer_shape& s, const float* x, const float* w, const float* bias, float* y) {
    forward_images(s, x, y, [&](const float* image, float* out) { forward_image(s, image, w, bias, out); });
}

void first_layer_pooled_avx2(const first_layer_shape& s, const float* x, const float* w, const float* bias, bool relu,
                             Dtype dtype, void* pooled, std::uint32_t* idx) {
    pooled_images<lanes, as_float32, as_float16, as_bfloat16>(
        s, x, dtype, pooled, idx,
        [&]<class Out>(Out, const float* columns, std::size_t span, std::uint32_t base, typename Out::storage* values,
                       std::uint32_t* indices) {
            pooled_image<Out>(s, columns, span, w, bias, relu, base, values, indices);
        });
}

} // namespace mixprec::autodiff::detail
