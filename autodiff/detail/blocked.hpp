#pragma once
// Internal: oneDNN's layout of an image in blocks of 16 channels (aBcd16b: conv_kernels.hpp, the AVX-512
// levels') and the plain one, through 16 × 16 transposes of 32-bit elements: the pooling that reads a
// convolution's output so (pool_2x2.hpp) and the data pass's dx handed over so (ops_conv_pool.cpp). Run
// them under detail::vectorized. At the AVX-512 levels a transpose is 64 shuffles of whole registers; GCC
// lowers it element by element at the others, where oneDNN's layouts come in blocks of 8 and the callers
// take other paths.

#include <mixprec/autodiff/detail/lanes.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mixprec::autodiff::detail {

/// The 16-element index table whose element i is f(i), for __builtin_shufflevector.
template <class F>
constexpr std::array<int, 16> shuffle_table(F f) {
    std::array<int, 16> t{};
    for (int i = 0; i < 16; ++i) t[static_cast<std::size_t>(i)] = f(i);
    return t;
}

/// One step of transpose_16x16: rows m[i] and m[i + S] (i without bit S) become shuffles Lo and Hi of
/// the two (indices 16 and up name the second row's elements).
template <std::array<int, 16> Lo, std::array<int, 16> Hi, std::size_t S>
[[gnu::always_inline]] inline void transpose_step(u32x16* m) {
    for (std::size_t i = 0; i < 16; ++i) {
        if (i & S) continue;
        const u32x16 a = m[i], b = m[i + S];
        m[i] = __builtin_shufflevector(a, b, Lo[0], Lo[1], Lo[2], Lo[3], Lo[4], Lo[5], Lo[6], Lo[7], Lo[8], Lo[9],
                                       Lo[10], Lo[11], Lo[12], Lo[13], Lo[14], Lo[15]);
        m[i + S] = __builtin_shufflevector(a, b, Hi[0], Hi[1], Hi[2], Hi[3], Hi[4], Hi[5], Hi[6], Hi[7], Hi[8], Hi[9],
                                           Hi[10], Hi[11], Hi[12], Hi[13], Hi[14], Hi[15]);
    }
}

/// m transposed in 64 shuffles (at the AVX-512 level: unpacks, two-row permutes and 128-bit lane
/// shuffles), with one twist: column c ends in row transposed_row(c), columns 1 and 2 of each group of
/// four trading places.
[[gnu::always_inline]] inline void transpose_16x16(u32x16* m) {
    // Within each 128-bit lane q of a row pair: 32-bit, then 64-bit interleaves; then whole lanes.
    constexpr auto lo32 = shuffle_table([](int i) { return (i % 2 ? 16 : 0) + i / 4 * 4 + i % 4 / 2; });
    constexpr auto hi32 = shuffle_table([](int i) { return (i % 2 ? 16 : 0) + i / 4 * 4 + 2 + i % 4 / 2; });
    constexpr auto lo64 = shuffle_table([](int i) { return (i % 4 / 2 ? 16 : 0) + i / 4 * 4 + i % 2; });
    constexpr auto hi64 = shuffle_table([](int i) { return (i % 4 / 2 ? 16 : 0) + i / 4 * 4 + 2 + i % 2; });
    constexpr auto even_lanes = shuffle_table([](int i) { return (i / 8 ? 16 : 0) + i / 4 % 2 * 8 + i % 4; });
    constexpr auto odd_lanes = shuffle_table([](int i) { return (i / 8 ? 16 : 0) + i / 4 % 2 * 8 + 4 + i % 4; });
    transpose_step<lo32, hi32, 1>(m);
    transpose_step<lo64, hi64, 2>(m);
    transpose_step<even_lanes, odd_lanes, 4>(m);
    transpose_step<even_lanes, odd_lanes, 8>(m);
}
constexpr std::size_t transposed_row(std::size_t c) { return (c & ~std::size_t{3}) | (c & 1) << 1 | (c & 2) >> 1; }

/// An image of `channels` planes of `plane` elements, laid out in blocks of `block` channels (element (o, p)
/// at v[((o / block)·plane + p)·block + o % block]): blocks of 16, the last padded to 16 (the AVX-512 levels'
/// layout), or channels last (block = channels, a multiple of 16), into plain planes at dst (element (o, p)
/// at dst[o·plane + p]), bit for bit. Sixteen channels and sixteen elements go as one tile: 16 loads, a
/// transpose, 16 stores, a last tile of a plane overlapping the one before (the same values again); a plane
/// of fewer than 16 elements goes element by element.
[[gnu::always_inline]] inline void unblock_16(const float* __restrict v, std::size_t channels, std::size_t plane,
                                              std::size_t block, float* __restrict dst) {
    constexpr std::size_t B = 16;
    if (plane < B) {
        for (std::size_t o = 0; o < channels; ++o)
            for (std::size_t p = 0; p < plane; ++p)
                dst[o * plane + p] = v[((o / block) * plane + p) * block + o % block];
        return;
    }
    for (std::size_t first = 0; first < channels; first += B) { // channels [first, first + 16): a tile's columns
        const float* column = v + (first / block) * plane * block + first % block;
        for (std::size_t k0 = 0;; k0 += B) {
            k0 = std::min(k0, plane - B); // the last tile ends at the plane's end
            u32x16 rows[B];               // [element][channel]
            for (std::size_t t = 0; t < B; ++t) std::memcpy(&rows[t], column + (k0 + t) * block, sizeof rows[t]);
            transpose_16x16(rows);
            for (std::size_t c = 0; c < std::min(B, channels - first); ++c)
                std::memcpy(dst + (first + c) * plane + k0, &rows[transposed_row(c)], sizeof rows[0]);
            if (k0 + B == plane) break;
        }
    }
}

} // namespace mixprec::autodiff::detail
