#pragma once
// Internal: a convolution's sizes, from its operands' shapes and options (with conv2d's shape errors), for
// the convolution ops (ops_conv.cpp, ops_conv_pool.cpp).

#include <mixprec/autodiff/ops_conv.hpp>
#include <mixprec/autodiff/tensor/errors.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <string>

namespace mixprec::autodiff::detail::conv {

/// A convolution's sizes: n images of c channels of h × w, o filters of kh × kw, outputs of ho × wo.
struct geometry {
    std::size_t n, c, h, w, o, kh, kw, ho, wo;
    Conv2dOptions opt;
    std::size_t k() const { return c * kh * kw; } // rows of the column matrix
    std::size_t l() const { return ho * wo; }     // output positions per image
};

/// "(a, b)", as shapes print.
inline std::string pair_text(std::array<std::size_t, 2> a) { return Shape{a[0], a[1]}.to_string(); }

/// The geometry of conv2d(x, w, bias, o), or a shape_error naming the shapes and options that do not fit.
inline geometry check(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Conv2dOptions& o) {
    const std::string xs = "input " + x.shape().to_string(), ws = "weights " + w.shape().to_string();
    if (x.rank() != 4) throw shape_error("conv2d: " + xs + " must have rank 4 (N, C, H, W)");
    if (w.rank() != 4) throw shape_error("conv2d: " + ws + " must have rank 4 (O, C, kh, kw)");
    const Shape& sx = x.shape();
    const Shape& sw = w.shape();
    if (sx[1] != sw[1])
        throw shape_error("conv2d: " + xs + " has " + std::to_string(sx[1]) + " channels but " + ws + " expect " +
                          std::to_string(sw[1]));
    if (bias && (bias->rank() != 1 || bias->shape()[0] != sw[0]))
        throw shape_error("conv2d: bias " + bias->shape().to_string() + " must have shape (" + std::to_string(sw[0]) +
                          ") for " + ws);
    check_same_dtype(x, w, "conv2d");
    if (bias) check_same_dtype(x, *bias, "conv2d bias");
    if (o.stride[0] == 0 || o.stride[1] == 0 || o.dilation[0] == 0 || o.dilation[1] == 0)
        throw shape_error("conv2d: stride " + pair_text(o.stride) + " and dilation " + pair_text(o.dilation) +
                          " must be at least 1 (" + xs + ", " + ws + ")");
    if (sw[2] == 0 || sw[3] == 0) throw shape_error("conv2d: " + ws + " have an empty kernel");
    geometry g{sx[0], sx[1], sx[2], sx[3], sw[0], sw[2], sw[3], 0, 0, o};
    const std::size_t span[2] = {o.dilation[0] * (g.kh - 1) + 1, o.dilation[1] * (g.kw - 1) + 1};
    const std::size_t in[2] = {g.h, g.w};
    std::size_t out[2];
    for (int a = 0; a < 2; ++a) {
        if (in[a] + 2 * o.padding[a] < span[a])
            throw shape_error("conv2d: " + xs + " padded by " + pair_text(o.padding) +
                              " is smaller than the dilated kernel " + pair_text({span[0], span[1]}) + " of " + ws);
        out[a] = (in[a] + 2 * o.padding[a] - span[a]) / o.stride[a] + 1;
    }
    g.ho = out[0];
    g.wo = out[1];
    return g;
}

} // namespace mixprec::autodiff::detail::conv
