#pragma once
// Internal: the weights' and bias's gradients of conv2d_max_pool computed straight from the pooled
// gradient and the argmax (ops_conv_pool.cpp), for a layer whose input needs no gradient (a first layer), with
// few taps, stride 1, no dilation and no padding. The general path writes the convolution's whole output
// gradient (zeros, and each window's gradient at its argmax) and has oneDNN or a GEMM multiply all of it,
// zeros included; here each window multiplies its gradient by the inputs under its argmax only: one
// product per tap and window instead of four, and no output gradient in memory.
//
// Lanes are 16 windows side by side along a row of windows. Each image's columns are split into even and
// odd ones (split_columns), so that what a lane reads lies next to what its neighbours read, and gathered
// once per image (gather_windows), so that each filter's pass reads them in order. Each lane's sums run
// over its windows in order in float32, one multiply and one add each (the TU is built with
// -ffp-contract=off), so the bits are those of every instruction-set level. Run the kernels under
// detail::vectorized.

#include <mixprec/autodiff/detail/lanes.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi" // lanes.hpp's vectors by value, always inlined

namespace mixprec::autodiff::detail {

/// One image's geometry: c channels of h × w, o filters of kh × kw, the convolution's output ho × wo
/// (stride 1, no dilation, no padding), pooled in (ho / 2) × (wo / 2) windows.
struct window_geometry {
    std::size_t c, h, w, o, kh, kw, ho, wo;
    std::size_t taps() const { return c * kh * kw; }
    std::size_t windows() const { return (ho / 2) * (wo / 2); }
    std::size_t chunks() const { return (wo / 2 + vector_lanes - 1) / vector_lanes; } ///< of 16 windows a row
    /// Elements of each half row (even or odd columns) in split_columns' layout: every chunk's lanes and
    /// the kw / 2 + 1 columns after them.
    std::size_t span() const { return chunks() * vector_lanes + kw / 2 + 1; }
    std::size_t split_size() const { return c * h * 2 * span(); }
    /// Vectors a chunk of windows reads: for each channel, kh + 1 rows by kw + 1 column shifts.
    std::size_t inputs() const { return c * (kh + 1) * (kw + 1); }
    std::size_t gathered_size() const { return (ho / 2) * chunks() * inputs() * vector_lanes; }
};

/// Where the even (parity 0) or odd (parity 1) columns of row r of channel c start in split.
[[gnu::always_inline]] inline std::size_t half_row(const window_geometry& g, std::size_t c, std::size_t r,
                                                   std::size_t parity) {
    return ((c * g.h + r) * 2 + parity) * g.span();
}

/// One image (c, h, w) split: element k of half_row(c, r, p) is column 2k + p of row r (zeros past the
/// row). Returns whether every element is finite.
template <class T>
[[gnu::always_inline]] inline bool split_columns(const window_geometry& g, const T* x, float* split) {
    std::fill_n(split, g.split_size(), 0.0f);
    bool finite = true;
    for (std::size_t c = 0; c < g.c; ++c)
        for (std::size_t i = 0; i < g.h; ++i) {
            const T* row = x + (c * g.h + i) * g.w;
            float* halves[2] = {split + half_row(g, c, i, 0), split + half_row(g, c, i, 1)};
            for (std::size_t j = 0; j < g.w; ++j) {
                const auto v = static_cast<float>(row[j]);
                finite &= v - v == 0.0f; // NaN for infinities and NaNs
                halves[j % 2][j / 2] = v;
            }
        }
    return finite;
}

/// What each chunk of windows reads, in the order the filters' passes read it: for window row i and
/// chunk k (windows 16k, 16k + 1, …), channel c, row 2i + r (r ≤ kh) and column shift s (s ≤ kw), the
/// 16 lanes at gathered + ((((i·chunks + k)·C + c)·(kh + 1) + r)·(kw + 1) + s)·16 (C = g.c): lane l holds
/// column 2(16k + l) + s. Lanes past the row hold 0: each copy loads a whole vector (every half row has
/// room for 16 lanes from any chunk's start, span()) and clears the lanes past the row.
template <bool Wide>
[[gnu::always_inline]] inline void gather_windows(const window_geometry& g, const float* split, float* gathered) {
    constexpr std::size_t L = vector_lanes;
    const std::size_t wo2 = g.wo / 2;
    for (std::size_t i = 0; i < g.ho / 2; ++i)
        for (std::size_t k0 = 0; k0 < wo2; k0 += L) {
            u32x16 past_row;
            lanes_from<Wide>(past_row, static_cast<std::uint32_t>(std::min(L, wo2 - k0)));
            for (std::size_t c = 0; c < g.c; ++c)
                for (std::size_t r = 0; r <= g.kh; ++r)
                    for (std::size_t s = 0; s <= g.kw; ++s) {
                        f32x16 v = load_lanes(split + half_row(g, c, 2 * i + r, s % 2) + k0 + s / 2);
                        take_lanes<Wide>(v, past_row, f32x16{});
                        store_lanes(gathered, v);
                        gathered += L;
                    }
        }
}

/// One image's gradients from its windows' gradients d (o, ho/2, wo/2) (the ReLU's derivative applied)
/// and the forward's argmax idx (indices into the convolution's output, whose first is `base` for this
/// image): a window's gradient goes to its argmax alone, so tap t of filter o gets d times the input
/// that tap read for the argmax. Writes lane l's sums (over windows 16k + l of each row, rows in order)
/// to dw[(o·taps + t)·16 + l] and db[o·16 + l]. C, KH and KW: the sizes when known at compile time (the
/// sums then stay in registers), else 0. The inputs come from gather_windows. N: the lanes a pass takes,
/// 16, or 8 (each chunk's two halves in turn: the AVX2 level, where a half is one register, so the sums
/// of 3 × 3 taps fit its 16 registers); each lane's sums are the same either way. Wide: the level's
/// registers hold N lanes (lanes.hpp).
template <std::size_t C, std::size_t KH, std::size_t KW, bool Wide, std::size_t N = vector_lanes>
[[gnu::always_inline]] inline void pooled_weights(const window_geometry& g, const float* gathered, const float* d,
                                                  const std::uint32_t* idx, std::uint32_t base, float* dw, float* db) {
    using F = std::conditional_t<N == 8, f32x8, f32x16>;
    using U = std::conditional_t<N == 8, u32x8, u32x16>;
    constexpr std::size_t L = vector_lanes, fixed = C * KH * KW;
    const std::size_t c_n = C ? C : g.c, kh = KH ? KH : g.kh, kw = KW ? KW : g.kw, taps = c_n * kh * kw;
    const std::size_t row = kw + 1, channel = (kh + 1) * row, inputs = c_n * channel;
    const std::size_t ho2 = g.ho / 2, wo2 = g.wo / 2, plane = g.ho * g.wo, size = g.o * ho2 * wo2;
    const auto wo = static_cast<std::uint32_t>(g.wo);
    U lane;
    lane_numbers(lane);
    for (std::size_t o = 0; o < g.o; ++o) {
        float* out = dw + o * taps * L;
        if (!fixed) std::fill_n(out, taps * L, 0.0f);
        for (std::size_t h = 0; h < L; h += N) {
            F fixed_sums[fixed ? fixed : 1] = {}; // registers when the taps are known
            F bias = {};
            const float* in = gathered + h;
            for (std::size_t i = 0; i < ho2; ++i)
                for (std::size_t k0 = 0; k0 < wo2; k0 += L, in += inputs * L) {
                    const std::size_t first = k0 + h; // the pass's first window in the row
                    if (first >= wo2) continue;       // lanes past the row add nothing
                    const std::size_t at = (o * ho2 + i) * wo2 + first;
                    const auto lanes = static_cast<std::uint32_t>(std::min(N, wo2 - first));
                    F gradient;
                    U offset;
                    if (at + N <= size) { // lanes past the row read the next windows, then drop them
                        gradient = load_lanes<F>(d + at);
                        std::memcpy(&offset, idx + at, sizeof offset);
                    } else {
                        float d_lanes[N] = {};
                        std::uint32_t idx_lanes[N] = {};
                        std::memcpy(d_lanes, d + at, lanes * sizeof(float));
                        std::memcpy(idx_lanes, idx + at, lanes * sizeof(std::uint32_t));
                        gradient = load_lanes<F>(d_lanes);
                        std::memcpy(&offset, idx_lanes, sizeof offset);
                    }
                    U past_row, right, below, diagonal; // masks (lanes.hpp)
                    lanes_from<Wide>(past_row, lanes);
                    gradient = 0.0f + gradient; // a −0 lands as +0, as max_pool2d's sum into zeros does
                    take_lanes<Wide>(gradient, past_row, F{});
                    offset -= static_cast<std::uint32_t>(base + o * plane + 2 * i * g.wo + 2 * first) + 2 * lane;
                    zero_lanes<Wide>(right, offset - 1u);
                    zero_lanes<Wide>(below, offset - wo);
                    zero_lanes<Wide>(diagonal, offset - (wo + 1u));
                    bias += gradient;
                    std::size_t t = 0;
                    for (std::size_t c = 0; c < c_n; ++c)
                        for (std::size_t th = 0; th < kh; ++th) {
                            const float* upper = in + (c * channel + th * row) * L;
                            const float* lower = upper + row * L;
                            for (std::size_t tw = 0; tw < kw; ++tw, ++t) {
                                F v = load_lanes<F>(upper + tw * L);
                                take_lanes<Wide>(v, right, load_lanes<F>(upper + (tw + 1) * L));
                                take_lanes<Wide>(v, below, load_lanes<F>(lower + tw * L));
                                take_lanes<Wide>(v, diagonal, load_lanes<F>(lower + (tw + 1) * L));
                                if constexpr (fixed != 0) {
                                    fixed_sums[t] += gradient * v;
                                } else {
                                    float* sum = out + t * L + h;
                                    store_lanes(sum, load_lanes<F>(sum) + gradient * v);
                                }
                            }
                        }
                }
            if constexpr (fixed != 0)
                for (std::size_t t = 0; t < taps; ++t) store_lanes(out + t * L + h, fixed_sums[t]);
            store_lanes(db + o * L + h, bias);
        }
    }
}

} // namespace mixprec::autodiff::detail

#pragma GCC diagnostic pop
