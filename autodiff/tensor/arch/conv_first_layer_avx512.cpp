// A first layer's forward pass on AVX-512 (conv_first_layer.hpp), 16 lanes. Compiled with the AVX-512 flags;
// runs only from the avx512 level up.
#include <mixprec/autodiff/tensor/detail/conv_first_layer_images.hpp>

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace mixprec::autodiff::detail {
namespace {

constexpr std::size_t lanes = 16;

/// Mask of the first n lanes (n ≤ 16).
__mmask16 first(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

/// ReLU as mixprec applies it: v where v > 0 or NaN, else +0.
__m512 relu(__m512 v) {
    const __mmask16 keep =
        _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_maskz_mov_ps(keep, v);
}

/// The sum plus the bias when there is one (no add otherwise: -0 stays -0, as in oneDNN's kernel).
__m512 with_bias(__m512 sum, const float* bias, std::size_t o) {
    return bias ? _mm512_add_ps(sum, _mm512_set1_ps(bias[o])) : sum;
}

void forward_image(const first_layer_shape& s, const float* x, const float* w, const float* bias, float* y) {
    const std::size_t ho = s.h - 2, wo = s.w - 2, plane = ho * wo;
    for (std::size_t r = 0; r < ho; ++r)
        for (std::size_t j = 0; j < wo; j += lanes) {
            const __mmask16 valid = first(std::min(lanes, wo - j)); // masked loads stay inside the rows
            __m512 in[taps];
#pragma GCC unroll 9
            for (std::size_t t = 0; t < taps; ++t)
                in[t] = _mm512_maskz_loadu_ps(valid, x + (r + t / 3) * s.w + j + t % 3);
            for (std::size_t o0 = 0; o0 < s.o; o0 += group) {
                const filter_group g(w, o0, s.o);
                __m512 sum[group];
                for (auto& v : sum) v = _mm512_setzero_ps();
#pragma GCC unroll 9
                for (std::size_t t = 0; t < taps; ++t)
#pragma GCC unroll 4
                    for (std::size_t f = 0; f < group; ++f)
                        sum[f] = _mm512_fmadd_ps(in[t], _mm512_set1_ps(g.w[f][t]), sum[f]);
#pragma GCC unroll 4
                for (std::size_t f = 0; f < group; ++f) {
                    if (o0 + f == s.o) break;
                    _mm512_mask_storeu_ps(y + (o0 + f) * plane + r * wo + j, valid, with_bias(sum[f], bias, o0 + f));
                }
            }
        }
}

/// The pooled pass's outputs as float32 holds them (stored as they are).
struct as_float32 {
    using storage = float;
    static __m512 rounded(__m512 v) { return v; }
    static void store(float* at, __mmask16 valid, __m512 v) { _mm512_mask_storeu_ps(at, valid, v); }
};

/// As float16 holds them: rounded to nearest even by the conversion instruction (the bits of narrow() at
/// the avx512 level, and of encode(): test_formats.cpp), overflow to infinity, a NaN quieted with its high
/// payload kept; stored as float16 bits.
struct as_float16 {
    using storage = std::uint16_t;
    static constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    static __m512 rounded(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, nearest)); }
    static void store(std::uint16_t* at, __mmask16 valid, __m512 v) {
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
    static void store(std::uint16_t* at, __mmask16 valid, __m512 v) {
        _mm256_mask_storeu_epi16(at, valid, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
    }
};

/// One image's pooled pass, each output through the ReLU (when applied) and rounded as Out holds it before
/// the max: the values and the argmax conv2d's rounded output gives max_pool2d.
template <class Out>
void pooled_image(const first_layer_shape& s, const float* split, std::size_t span, const float* w, const float* bias,
                  bool relu_applied, std::uint32_t base, typename Out::storage* pooled, std::uint32_t* idx) {
    const std::size_t ho = s.h - 2, wo = s.w - 2, ho2 = ho / 2, wo2 = wo / 2, windows = ho2 * wo2;
    const auto row = static_cast<std::int32_t>(wo);
    const __m512i lane = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30); // 2·lane
    for (std::size_t i = 0; i < ho2; ++i)
        for (std::size_t k = 0; k < wo2; k += lanes) {
            const __mmask16 valid = first(std::min(lanes, wo2 - k));
            __m512 in[4][4]; // rows 2i + a, columns 2(k + lane) + b
#pragma GCC unroll 4
            for (std::size_t a = 0; a < 4; ++a)
#pragma GCC unroll 4
                for (std::size_t b = 0; b < 4; ++b)
                    in[a][b] = _mm512_loadu_ps(split + ((2 * i + a) * 2 + b % 2) * span + k + b / 2);
            for (std::size_t o0 = 0; o0 < s.o; o0 += group) {
                const filter_group g(w, o0, s.o);
                __m512 sum[group][4]; // the window's outputs (0, 0), (0, 1), (1, 0), (1, 1)
                for (auto& f : sum)
                    for (auto& v : f) v = _mm512_setzero_ps();
#pragma GCC unroll 9
                for (std::size_t t = 0; t < taps; ++t) {
                    const std::size_t p = t / 3, q = t % 3;
#pragma GCC unroll 4
                    for (std::size_t f = 0; f < group; ++f) {
                        const __m512 wt = _mm512_set1_ps(g.w[f][t]);
                        sum[f][0] = _mm512_fmadd_ps(in[p][q], wt, sum[f][0]);
                        sum[f][1] = _mm512_fmadd_ps(in[p][q + 1], wt, sum[f][1]);
                        sum[f][2] = _mm512_fmadd_ps(in[p + 1][q], wt, sum[f][2]);
                        sum[f][3] = _mm512_fmadd_ps(in[p + 1][q + 1], wt, sum[f][3]);
                    }
                }
#pragma GCC unroll 4
                for (std::size_t f = 0; f < group; ++f) {
                    const std::size_t o = o0 + f;
                    if (o == s.o) break;
                    __m512 v[4];
#pragma GCC unroll 4
                    for (std::size_t e = 0; e < 4; ++e) {
                        v[e] = with_bias(sum[f][e], bias, o);
                        if (relu_applied) v[e] = relu(v[e]);
                        v[e] = Out::rounded(v[e]);
                    }
                    __m512 best = v[0];
                    __m512i offset = _mm512_setzero_si512();
                    const std::int32_t offsets[4] = {0, 1, row, row + 1};
#pragma GCC unroll 3
                    for (std::size_t e = 1; e < 4; ++e) {
                        const __mmask16 replaces =
                            _mm512_cmp_ps_mask(v[e], best, _CMP_GT_OQ) |
                            (_mm512_cmp_ps_mask(v[e], v[e], _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
                        best = _mm512_mask_mov_ps(best, replaces, v[e]);
                        offset = _mm512_mask_mov_epi32(offset, replaces, _mm512_set1_epi32(offsets[e]));
                    }
                    const auto start = static_cast<std::int32_t>(base + o * ho * wo + 2 * i * wo + 2 * k);
                    const __m512i at = _mm512_add_epi32(_mm512_add_epi32(_mm512_set1_epi32(start), lane), offset);
                    Out::store(pooled + o * windows + i * wo2 + k, valid, best);
                    _mm512_mask_storeu_epi32(idx + o * windows + i * wo2 + k, valid, at);
                }
            }
        }
}

} // namespace

void first_layer_forward_avx512(const first_layer_shape& s, const float* x, const float* w, const float* bias,
                                float* y) {
    forward_images(s, x, y, [&](const float* image, float* out) { forward_image(s, image, w, bias, out); });
}

void first_layer_pooled_avx512(const first_layer_shape& s, const float* x, const float* w, const float* bias, bool relu,
                               Dtype dtype, void* pooled, std::uint32_t* idx) {
    pooled_images<lanes, as_float32, as_float16, as_bfloat16>(
        s, x, dtype, pooled, idx,
        [&]<class Out>(Out, const float* columns, std::size_t span, std::uint32_t base, typename Out::storage* values,
                       std::uint32_t* indices) {
            pooled_image<Out>(s, columns, span, w, bias, relu, base, values, indices);
        });
}

} // namespace mixprec::autodiff::detail
