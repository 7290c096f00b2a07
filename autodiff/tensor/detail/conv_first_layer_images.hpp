#pragma once
// Internal: the first layer's passes (conv_first_layer.hpp) written once, over a vector type V that an arch/
// file defines for its instruction set (V::lanes floats; masks of the first lanes; loads, stores, FMA, the
// ReLU, the running maximum with its offset (NaN-aware, and a cheaper one for windows without NaN, with
// the ReLU of that maximum), the argmax's indices), and over Out, how a pooled maximum is
// rounded and stored. Include only from those arch/ files: everything here sits in an unnamed namespace, so
// that no instantiation compiled with one file's instruction set can stand in for another's.

#include <mixprec/autodiff/tensor/detail/conv_first_layer.hpp>
#include <mixprec/autodiff/tensor/detail/grown.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mixprec::autodiff::detail {
namespace {

constexpr std::size_t taps = 9;
/// Filters whose sums run side by side: 16 independent FMA chains in the pooled pass (four outputs a
/// window), 4 in conv2d's.
constexpr std::size_t group = 4;

/// The weights of filter o0 + f at tap t, for f < group: a last group of fewer filters repeats its last
/// filter (computed, never stored).
struct filter_group {
    const float* w[group];
    filter_group(const float* weights, std::size_t o0, std::size_t o) {
        for (std::size_t f = 0; f < group; ++f) w[f] = weights + std::min(o0 + f, o - 1) * taps;
    }
};

/// One image's columns split: element k of split[(r·2 + p)·span] is column 2k + p of row r, zeros past the row
/// (the layout of pooled_weights.hpp's split_columns for one channel; that header sits above tensor/).
void split_columns(const first_layer_shape& s, const float* x, std::size_t span, float* split) {
    std::fill_n(split, s.h * 2 * span, 0.0f);
    for (std::size_t r = 0; r < s.h; ++r)
        for (std::size_t c = 0; c < s.w; ++c) split[(r * 2 + c % 2) * span + c / 2] = x[r * s.w + c];
}

/// The sum plus the bias when there is one (no add otherwise: -0 stays -0, as in oneDNN's kernel).
template <class V>
typename V::floats with_bias(typename V::floats sum, const float* bias, std::size_t o) {
    return bias ? V::add(sum, V::all(bias[o])) : sum;
}

/// One image's conv2d pass: the outputs of a row V::lanes at a time, `group` filters side by side.
template <class V>
void forward_image(const first_layer_shape& s, const float* x, const float* w, const float* bias, float* y) {
    const std::size_t ho = s.h - 2, wo = s.w - 2, plane = ho * wo;
    for (std::size_t r = 0; r < ho; ++r)
        for (std::size_t j = 0; j < wo; j += V::lanes) {
            const auto valid = V::first(std::min(V::lanes, wo - j)); // masked loads stay inside the rows
            typename V::floats in[taps];
#pragma GCC unroll 9
            for (std::size_t t = 0; t < taps; ++t) in[t] = V::load(x + (r + t / 3) * s.w + j + t % 3, valid);
            for (std::size_t o0 = 0; o0 < s.o; o0 += group) {
                const filter_group g(w, o0, s.o);
                typename V::floats sum[group];
                for (auto& v : sum) v = V::zero();
#pragma GCC unroll 9
                for (std::size_t t = 0; t < taps; ++t)
#pragma GCC unroll 4
                    for (std::size_t f = 0; f < group; ++f) sum[f] = V::fmadd(in[t], V::all(g.w[f][t]), sum[f]);
#pragma GCC unroll 4
                for (std::size_t f = 0; f < group; ++f) {
                    if (o0 + f == s.o) break;
                    V::store(y + (o0 + f) * plane + r * wo + j, valid, with_bias<V>(sum[f], bias, o0 + f));
                }
            }
        }
}

/// One image's pooled pass, each output through the ReLU (when applied) and rounded as Out holds it before
/// the max: the values and the argmax conv2d's rounded output gives max_pool2d. Windows of a row V::lanes at
/// a time, from the image's columns split in rows of `span`.
template <class V, class Out>
void pooled_image(const first_layer_shape& s, const float* split, std::size_t span, const float* w, const float* bias,
                  bool relu, std::uint32_t base, typename Out::storage* pooled, std::uint32_t* idx) {
    const std::size_t ho = s.h - 2, wo = s.w - 2, ho2 = ho / 2, wo2 = wo / 2, windows = ho2 * wo2;
    const auto row = static_cast<std::int32_t>(wo);
    for (std::size_t i = 0; i < ho2; ++i)
        for (std::size_t k = 0; k < wo2; k += V::lanes) {
            const std::size_t count = std::min(V::lanes, wo2 - k);
            const auto valid = V::first(count);
            typename V::floats in[4][4]; // rows 2i + a, columns 2(k + lane) + b
#pragma GCC unroll 4
            for (std::size_t a = 0; a < 4; ++a)
#pragma GCC unroll 4
                for (std::size_t b = 0; b < 4; ++b)
                    in[a][b] = V::load(split + ((2 * i + a) * 2 + b % 2) * span + k + b / 2);
            for (std::size_t o0 = 0; o0 < s.o; o0 += group) {
                const filter_group g(w, o0, s.o);
                typename V::floats sum[group][4]; // the window's outputs (0, 0), (0, 1), (1, 0), (1, 1)
                for (auto& f : sum)
                    for (auto& v : f) v = V::zero();
#pragma GCC unroll 9
                for (std::size_t t = 0; t < taps; ++t) {
                    const std::size_t p = t / 3, q = t % 3;
#pragma GCC unroll 4
                    for (std::size_t f = 0; f < group; ++f) {
                        const auto wt = V::all(g.w[f][t]);
                        sum[f][0] = V::fmadd(in[p][q], wt, sum[f][0]);
                        sum[f][1] = V::fmadd(in[p][q + 1], wt, sum[f][1]);
                        sum[f][2] = V::fmadd(in[p + 1][q], wt, sum[f][2]);
                        sum[f][3] = V::fmadd(in[p + 1][q + 1], wt, sum[f][3]);
                    }
                }
#pragma GCC unroll 4
                for (std::size_t f = 0; f < group; ++f) {
                    const std::size_t o = o0 + f;
                    if (o == s.o) break;
                    typename V::floats v[4];
#pragma GCC unroll 4
                    for (std::size_t e = 0; e < 4; ++e) v[e] = with_bias<V>(sum[f][e], bias, o);
                    typename V::floats best;
                    typename V::offsets offset = V::no_offset();
                    const std::int32_t offsets[4] = {0, 1, row, row + 1};
                    if (!V::any_nan(v[0], v[1], v[2], v[3])) [[likely]] {
                        // No NaN: rounding keeps the order, so the ReLU may clamp the maximum alone, which gives
                        // the same value, and the same first argmax where it is positive (else the first of
                        // the four zeros the ReLU made: offset 0). A third fewer instructions than below.
#pragma GCC unroll 4
                        for (std::size_t e = 0; e < 4; ++e) v[e] = Out::rounded(v[e]);
                        best = v[0];
#pragma GCC unroll 3
                        for (std::size_t e = 1; e < 4; ++e) V::keep_greater(best, offset, v[e], offsets[e]);
                        if (relu) V::relu_kept(best, offset);
                    } else {
#pragma GCC unroll 4
                        for (std::size_t e = 0; e < 4; ++e) {
                            if (relu) v[e] = V::relu(v[e]);
                            v[e] = Out::rounded(v[e]);
                        }
                        best = v[0];
#pragma GCC unroll 3
                        for (std::size_t e = 1; e < 4; ++e) V::keep_larger(best, offset, v[e], offsets[e]);
                    }
                    const auto start = static_cast<std::int32_t>(base + o * ho * wo + 2 * i * wo + 2 * k);
                    Out::store(pooled + o * windows + i * wo2 + k, count, valid, best);
                    V::store_indices(idx + o * windows + i * wo2 + k, valid, start, offset);
                }
            }
        }
}

/// first_layer_forward on V's vectors: each image of the batch, on the threads of a team.
template <class V>
void forward_images(const first_layer_shape& s, const float* x, const float* w, const float* bias, float* y) {
    const std::size_t size = s.h * s.w, out = s.o * (s.h - 2) * (s.w - 2);
    split(s.n, 1, [&](std::size_t n0, std::size_t n1) {
        for (std::size_t n = n0; n < n1; ++n) forward_image<V>(s, x + n * size, w, bias, y + n * out);
    });
}

/// first_layer_pooled on V's vectors, the maxima rounded and stored by F32, F16 or BF16 as `dtype` says:
/// each image of the batch, its columns split in rows of `span` (the windows of a row in whole vectors, and
/// two more), on the threads of a team.
template <class V, class F32, class F16, class BF16>
void pooled_images(const first_layer_shape& s, const float* x, const float* w, const float* bias, bool relu,
                   Dtype dtype, void* pooled, std::uint32_t* idx) {
    const std::size_t size = s.h * s.w, l = (s.h - 2) * (s.w - 2), wo2 = (s.w - 2) / 2;
    const std::size_t span = (wo2 + V::lanes - 1) / V::lanes * V::lanes + 2, out = s.o * ((s.h - 2) / 2) * wo2;
    const auto images = [&]<class Out>(Out) {
        auto* values = static_cast<typename Out::storage*>(pooled);
        split(s.n, 1, [&](std::size_t n0, std::size_t n1) {
            thread_local std::vector<float> room;
            float* columns = grown(room, s.h * 2 * span);
            for (std::size_t n = n0; n < n1; ++n) {
                split_columns(s, x + n * size, span, columns);
                pooled_image<V, Out>(s, columns, span, w, bias, relu, static_cast<std::uint32_t>(n * s.o * l),
                                     values + n * out, idx + n * out);
            }
        });
    };
    if (dtype == Dtype::float16) return images(F16{});
    if (dtype == Dtype::bfloat16) return images(BF16{});
    images(F32{});
}

} // namespace
} // namespace mixprec::autodiff::detail
