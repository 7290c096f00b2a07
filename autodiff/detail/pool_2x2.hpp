#pragma once
// Internal: the kernels of 2×2 max pooling with stride 2 and no padding (the common case), shared by
// max_pool2d (ops_pool.cpp) and the convolution that pools its own output (conv2d_max_pool, ops_conv_pool.cpp).
// Run them under detail::vectorized: their fixed-width loops are written for the vectorizer.

#include <mixprec/autodiff/detail/blocked.hpp>
#include <mixprec/autodiff/detail/lanes.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace mixprec::autodiff::detail {

/// Whether `value` should replace `best` as a window's maximum: larger, or the first NaN (a NaN compares
/// unequal to itself).
inline bool better(float value, float best) { return (value > best) | ((value != value) & (best == best)); }

/// better() as a mask, all ones or 0: the 2×2 path picks with it instead of branching, which would
/// mispredict on every other window of random data.
inline std::uint32_t replaces(float value, float best) { return 0u - static_cast<std::uint32_t>(better(value, best)); }
inline float pick(std::uint32_t mask, float a, float b) {
    return std::bit_cast<float>((mask & std::bit_cast<std::uint32_t>(a)) | (~mask & std::bit_cast<std::uint32_t>(b)));
}

/// One 2×2 window, its elements a, b (upper row) and c, d (lower row) scanned in that order: its maximum
/// into `max`, and the argmax's offset from a in a plane w elements wide (0, 1, w or w + 1) returned.
[[gnu::always_inline]] inline std::uint32_t window_argmax(float a, float b, float c, float d, std::uint32_t w,
                                                          float& max) {
    float best = a;
    std::uint32_t offset = 0;
    std::uint32_t m = replaces(b, best);
    best = pick(m, b, best);
    offset = (m & 1u) | (~m & offset);
    m = replaces(c, best);
    best = pick(m, c, best);
    offset = (m & w) | (~m & offset);
    m = replaces(d, best);
    max = pick(m, d, best);
    return (m & (w + 1)) | (~m & offset);
}

/// Outputs [0, n) of one output row of argmax for 2×2 windows with stride 2 and no padding (the common
/// case): rows r0 and r1 of a plane in, window j's index in the plane (plus `base`) and its value out. The
/// same scan order and NaN rule as max_pool2d's general loop, with fixed bounds and no branches: for a
/// constant n, GCC turns it into a few vector operations.
template <std::size_t n>
[[gnu::always_inline]] inline void argmax_2x2_run(const float* __restrict r0, const float* __restrict r1,
                                                  std::uint32_t base, std::uint32_t w, std::uint32_t* __restrict out,
                                                  float* __restrict max) {
    for (std::size_t j = 0; j < n; ++j)
        out[j] = base + static_cast<std::uint32_t>(2 * j) +
                 window_argmax(r0[2 * j], r0[2 * j + 1], r1[2 * j], r1[2 * j + 1], w, max[j]);
}

/// run(integral_constant<n>, j) over windows [0, wo) of an output row, in runs of n = 8 (or 4, or 1)
/// windows starting at j. The rows of the cnn model's pools are short (13 and 5 windows): a loop over wo
/// left them to scalar code below one vector of AVX-512. Each window's results depend on its own elements only,
/// so a last run that overlaps the one before writes the same values again.
template <class Run>
[[gnu::always_inline]] inline void in_runs(std::size_t wo, Run run) {
    const auto runs = [&]<std::size_t n>(std::integral_constant<std::size_t, n> width) {
        for (std::size_t j = 0;; j += n) {
            j = std::min(j, wo - n); // the last run ends at wo
            run(width, j);
            if (j + n == wo) return;
        }
    };
    if (wo >= 8) return runs(std::integral_constant<std::size_t, 8>{});
    if (wo >= 4) return runs(std::integral_constant<std::size_t, 4>{});
    for (std::size_t j = 0; j < wo; ++j) run(std::integral_constant<std::size_t, 1>{}, j);
}

inline void argmax_2x2_row(const float* r0, const float* r1, std::size_t wo, std::uint32_t base, std::uint32_t w,
                           std::uint32_t* out, float* max) {
    in_runs(wo, [&]<std::size_t n>(std::integral_constant<std::size_t, n>, std::size_t j) {
        argmax_2x2_run<n>(r0 + 2 * j, r1 + 2 * j, base + static_cast<std::uint32_t>(2 * j), w, out + j, max + j);
    });
}

/// argmax_2x2_row's windows for every channel of a block of B, in a channel-blocked layout (oneDNN's
/// aBcd8b and aBcd16b, `stride` = B) or B channels of a channels-last one (acdb, `stride` = the channel
/// count): element (c, i, j) of the block's h × w planes at v[(i·w + j)·stride + c], taken as
/// value(v[…]) (the pass's ReLU and rounding, applied on the way). Channel c's window (i, j) puts its value
/// at max[c·out + i·(w/2) + j] and its index at idx[c·out + i·(w/2) + j]: base + c·plane (its plane's first
/// index) + its index in the plane, out = (h/2)·(w/2). Channels [0, channels) are written (a last block
/// may be part padding). Each lane runs argmax_2x2_run's scan and picks, so ties and NaNs go the same way.
/// The windows go in tiles of 16; with B = 16 a tile's results are transposed so that each channel stores
/// its 16 as one run, instead of one element at a time.
template <std::size_t B, class Value>
[[gnu::always_inline]] inline void argmax_2x2_blocked(const float* v, std::size_t stride, std::size_t h, std::size_t w,
                                                      std::size_t channels, std::uint32_t base, std::uint32_t plane,
                                                      std::uint32_t* idx, float* max, Value value) {
    constexpr std::size_t tile = 16;
    const std::size_t wo = w / 2, out = (h / 2) * wo;
    const auto w32 = static_cast<std::uint32_t>(w);
    std::size_t i = 0, j = 0; // the window of k0
    for (std::size_t k0 = 0; k0 < out; k0 += tile) {
        const std::size_t windows = std::min(tile, out - k0);
        // [window][channel]; with B = 16 one vector a window, which the transposes take as they are
        using row = std::conditional_t<B == 16, u32x16, std::uint32_t[B]>;
        alignas(64) row best[tile], at[tile];
        for (std::size_t t = 0; t < windows; ++t) {
            const float* r0 = v + (2 * i * w + 2 * j) * stride;
            const float* r1 = r0 + w * stride;
            const auto first = base + static_cast<std::uint32_t>(2 * i * w + 2 * j);
            for (std::size_t c = 0; c < B; ++c) {
                float m;
                at[t][c] =
                    first + static_cast<std::uint32_t>(c) * plane +
                    window_argmax(value(r0[c]), value(r0[stride + c]), value(r1[c]), value(r1[stride + c]), w32, m);
                best[t][c] = std::bit_cast<std::uint32_t>(m);
            }
            if (++j == wo) j = 0, ++i;
        }
        if constexpr (B == 16) {
            if (windows < tile) { // a last tile's unused rows, which the transposes read
                std::memset(&best[windows], 0, (tile - windows) * sizeof best[0]);
                std::memset(&at[windows], 0, (tile - windows) * sizeof at[0]);
            }
            transpose_16x16(best);
            transpose_16x16(at);
            for (std::size_t c = 0; c < channels; ++c) {
                const std::size_t row = transposed_row(c);
                if (windows == tile) { // one vector store each
                    std::memcpy(max + c * out + k0, &best[row], sizeof best[row]);
                    std::memcpy(idx + c * out + k0, &at[row], sizeof at[row]);
                    continue;
                }
                for (std::size_t t = 0; t < windows; ++t) {
                    max[c * out + k0 + t] = std::bit_cast<float>(best[row][t]);
                    idx[c * out + k0 + t] = at[row][t];
                }
            }
        } else {
            for (std::size_t t = 0; t < windows; ++t)
                for (std::size_t c = 0; c < channels; ++c) {
                    max[c * out + k0 + t] = std::bit_cast<float>(best[t][c]);
                    idx[c * out + k0 + t] = at[t][c];
                }
        }
    }
}

/// The gradient of windows [0, n) of a 2×2 output row (stride 2, no padding) written into rows r0 and r1
/// of dx: each element is in one window only, so it gets d[j] if it is that window's argmax (index at[j],
/// window j starting at base + 2j) and 0 if not. 0 + d[j] rather than d[j]: the same bits as summing into
/// zeros (a −0 gradient lands as +0).
template <std::size_t n>
[[gnu::always_inline]] inline void gradient_2x2_run(const std::uint32_t* __restrict at, const float* __restrict d,
                                                    std::uint32_t base, std::uint32_t w, float* __restrict r0,
                                                    float* __restrict r1) {
    // not unrolled before the vectorizer sees the loop: unrolled, the conditions stay branches
#pragma GCC unroll 1
    for (std::size_t j = 0; j < n; ++j) {
        const std::uint32_t offset = at[j] - (base + static_cast<std::uint32_t>(2 * j));
        const float g = 0.0f + d[j];
        r0[2 * j] = offset == 0 ? g : 0.0f;
        r0[2 * j + 1] = offset == 1 ? g : 0.0f;
        r1[2 * j] = offset == w ? g : 0.0f;
        r1[2 * j + 1] = offset == w + 1 ? g : 0.0f;
    }
}

/// The gradient of one plane of h × w elements (v) from its 2×2 windows' output gradients d and argmax
/// indices `at` (the plane's first element has index `base`), each element written once: d's value
/// (0 + d: a −0 lands as +0, as summing into zeros would) where it is its window's argmax, 0 elsewhere,
/// the elements of an odd last row or column included.
inline void gradient_2x2_plane(const std::uint32_t* at, const float* d, std::uint32_t base, std::size_t h,
                               std::size_t w, float* v) {
    const std::size_t ho = h / 2, wo = w / 2;
    const auto w32 = static_cast<std::uint32_t>(w);
    for (std::size_t i = 0; i < ho; ++i, at += wo, d += wo) {
        float* r0 = v + 2 * i * w;
        float* r1 = r0 + w;
        const std::uint32_t row = base + static_cast<std::uint32_t>(2 * i * w);
        in_runs(wo, [&]<std::size_t n>(std::integral_constant<std::size_t, n>, std::size_t j) {
            gradient_2x2_run<n>(at + j, d + j, row + static_cast<std::uint32_t>(2 * j), w32, r0 + 2 * j, r1 + 2 * j);
        });
        for (std::size_t c = 2 * wo; c < w; ++c) r0[c] = r1[c] = 0.0f;
    }
    std::fill(v + 2 * ho * w, v + h * w, 0.0f);
}

} // namespace mixprec::autodiff::detail
