#pragma once
// Internal: what the first layer's passes (conv_first_layer.hpp) share at every vector width: the filters of
// a group, an image's columns split into even and odd ones, and the loops over a batch. Include only from
// the arch/ files of those passes: everything here sits in an unnamed namespace, so that no instantiation
// compiled with one file's instruction set can stand in for another's.

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

/// first_layer_forward: image(x, y) on each image of the batch, on the threads of a team.
template <class Image>
void forward_images(const first_layer_shape& s, const float* x, float* y, Image image) {
    const std::size_t size = s.h * s.w, out = s.o * (s.h - 2) * (s.w - 2);
    split(s.n, 1, [&](std::size_t n0, std::size_t n1) {
        for (std::size_t n = n0; n < n1; ++n) image(x + n * size, y + n * out);
    });
}

/// first_layer_pooled: image(Out{}, columns, span, base, pooled, idx) on each image of the batch, its columns
/// split in rows of `span` (the windows of a row in vectors of `lanes`, and two more), on the threads of a
/// team. Out is F32, F16 or BF16 as `dtype` says: how the pass rounds and stores its maxima.
template <std::size_t lanes, class F32, class F16, class BF16, class Image>
void pooled_images(const first_layer_shape& s, const float* x, Dtype dtype, void* pooled, std::uint32_t* idx,
                   Image image) {
    const std::size_t size = s.h * s.w, l = (s.h - 2) * (s.w - 2), wo2 = (s.w - 2) / 2;
    const std::size_t span = (wo2 + lanes - 1) / lanes * lanes + 2, out = s.o * ((s.h - 2) / 2) * wo2;
    const auto images = [&]<class Out>(Out) {
        auto* values = static_cast<typename Out::storage*>(pooled);
        split(s.n, 1, [&](std::size_t n0, std::size_t n1) {
            thread_local std::vector<float> room;
            float* columns = grown(room, s.h * 2 * span);
            for (std::size_t n = n0; n < n1; ++n) {
                split_columns(s, x + n * size, span, columns);
                image(Out{}, columns, span, static_cast<std::uint32_t>(n * s.o * l), values + n * out, idx + n * out);
            }
        });
    };
    if (dtype == Dtype::float16) return images(F16{});
    if (dtype == Dtype::bfloat16) return images(BF16{});
    images(F32{});
}

} // namespace
} // namespace mixprec::autodiff::detail
