#include <mixprec/autodiff/ops_pool.hpp>

#include <mixprec/autodiff/detail/pool_2x2.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace mixprec::autodiff {
namespace {

struct window {
    std::size_t r0, r1, c0, c1; // rows [r0, r1) and columns [c0, c1) of x inside the window
};

struct geometry {
    std::size_t planes, h, w, ho, wo; // planes = N·C
    std::array<std::size_t, 2> kernel, stride, padding;

    /// 2×2 windows with stride 2 and no padding (the common case), which have paths of their own.
    bool two_by_two() const {
        constexpr std::array<std::size_t, 2> two{2, 2}, none{0, 0};
        return kernel == two && stride == two && padding == none;
    }

    window at(std::size_t i, std::size_t j) const {
        const std::size_t r = i * stride[0], c = j * stride[1]; // window start + padding
        return {std::max(r, padding[0]) - padding[0], std::min(r + kernel[0], h + padding[0]) - padding[0],
                std::max(c, padding[1]) - padding[1], std::min(c + kernel[1], w + padding[1]) - padding[1]};
    }
};

/// "(a, b)", as shapes print.
std::string pair_text(std::array<std::size_t, 2> a) { return Shape{a[0], a[1]}.to_string(); }

geometry check(const char* op, const Tensor& x, std::array<std::size_t, 2> kernel, std::array<std::size_t, 2> stride,
               std::array<std::size_t, 2> padding) {
    const std::string what = std::string(op) + ": input " + x.shape().to_string();
    if (x.rank() != 4) throw shape_error(what + " must have rank 4 (N, C, H, W)");
    if (kernel[0] == 0 || kernel[1] == 0)
        throw shape_error(what + ": kernel " + pair_text(kernel) + " must be at least 1");
    for (int a = 0; a < 2; ++a)
        if (stride[a] == 0) stride[a] = kernel[a];
    geometry g{x.shape()[0] * x.shape()[1], x.shape()[2], x.shape()[3], 0, 0, kernel, stride, padding};
    const std::size_t in[2] = {g.h, g.w};
    std::size_t out[2];
    for (int a = 0; a < 2; ++a) {
        if (2 * padding[a] > kernel[a])
            throw shape_error(what + ": padding " + pair_text(padding) + " exceeds half the kernel " +
                              pair_text(kernel));
        if (in[a] + 2 * padding[a] < kernel[a])
            throw shape_error(what + " padded by " + pair_text(padding) + " is smaller than the kernel " +
                              pair_text(kernel));
        out[a] = (in[a] + 2 * padding[a] - kernel[a]) / stride[a] + 1;
    }
    g.ho = out[0];
    g.wo = out[1];
    return g;
}

/// dx of `planes` planes (starting at plane `first`, `v` at its first element) for 2×2 windows with
/// stride 2 and no padding, written once, without zeroing first.
void gradient_2x2(const geometry& g, const std::uint32_t* at, const float* d, std::size_t first, std::size_t planes,
                  float* v) {
    const std::size_t out = g.ho * g.wo;
    for (std::size_t pl = 0; pl < planes; ++pl, v += g.h * g.w, at += out, d += out)
        detail::gradient_2x2_plane(at, d, static_cast<std::uint32_t>((first + pl) * g.h * g.w), g.h, g.w, v);
}

/// Index in x of the max of each window (first on ties, first NaN wins) and that element, for the output
/// elements of `planes` consecutive planes of x starting at plane `first` (`plane` points at that one's
/// first element).
void argmax(const geometry& g, const float* plane, std::size_t first, std::size_t planes, std::uint32_t* out,
            float* max) {
    for (std::size_t pl = 0; pl < planes; ++pl, plane += g.h * g.w) {
        const auto base = static_cast<std::uint32_t>((first + pl) * g.h * g.w);
        if (g.two_by_two()) {
            for (std::size_t i = 0; i < g.ho; ++i, out += g.wo, max += g.wo)
                detail::argmax_2x2_row(plane + 2 * i * g.w, plane + (2 * i + 1) * g.w, g.wo,
                                       base + static_cast<std::uint32_t>(2 * i * g.w), static_cast<std::uint32_t>(g.w),
                                       out, max);
            continue;
        }
        for (std::size_t i = 0; i < g.ho; ++i)
            for (std::size_t j = 0; j < g.wo; ++j) {
                const window v = g.at(i, j);
                std::size_t best_at = v.r0 * g.w + v.c0;
                float best = -std::numeric_limits<float>::infinity();
                for (std::size_t r = v.r0; r < v.r1; ++r)
                    for (std::size_t c = v.c0; c < v.c1; ++c) {
                        const float value = plane[r * g.w + c];
                        const bool b = detail::better(value, best);
                        best = b ? value : best;
                        best_at = b ? r * g.w + c : best_at;
                    }
                *out++ = base + static_cast<std::uint32_t>(best_at);
                *max++ = plane[best_at];
            }
    }
}

/// Elements [at, at + n) of t as floats: t's own for float32, else widened into `scratch`.
const float* floats_at(const Tensor& t, std::size_t at, std::size_t n, std::vector<float>& scratch) {
    if (scratch.size() < n && t.dtype() != Dtype::float32) scratch.resize(n);
    return kernels::detail::floats_at(t, at, n, scratch);
}

using kernels::detail::result_at;
using kernels::detail::store;

/// A pooling: y (in x's dtype) from forward(first plane, planes, x's planes, y's planes in float32) on
/// blocks of planes, each result rounded once.
template <class Forward>
Tensor pool_forward(const geometry& g, const Tensor& x, Forward forward) {
    const std::size_t in = g.h * g.w, out = g.ho * g.wo;
    Tensor y = Tensor::uninitialized(Shape{x.shape()[0], x.shape()[1], g.ho, g.wo}, x.dtype());
    RoundingBatch rounding(y);
    detail::split_blocks(g.planes, out, [&](std::size_t first, std::size_t end) {
        const std::size_t planes = end - first;
        thread_local std::vector<float> xs, ys;
        float* v = result_at(y, first * out, planes * out, ys);
        forward(first, planes, floats_at(x, first * in, planes * in, xs), v);
        store(v, y, first * out, planes * out, rounding);
    });
    return y;
}

/// A pooling's gradient: dx (`shape`, in `dtype`) in float32 from gradient(first plane, planes, dy's planes,
/// dx's planes, every element of which it writes) on blocks of planes, each result rounded once.
template <class Gradient>
Tensor pool_backward(const geometry& g, const Shape& shape, Dtype dtype, const Tensor& dy, Gradient gradient) {
    const std::size_t in = g.h * g.w, out = g.ho * g.wo;
    Tensor dx = Tensor::uninitialized(shape, dtype);
    RoundingBatch rounding(dx);
    detail::split_blocks(g.planes, in, [&](std::size_t first, std::size_t end) {
        const std::size_t planes = end - first;
        thread_local std::vector<float> dys, dxs;
        float* v = result_at(dx, first * in, planes * in, dxs);
        gradient(first, planes, floats_at(dy, first * out, planes * out, dys), v);
        store(v, dx, first * in, planes * in, rounding);
    });
    return dx;
}

} // namespace

Tensor max_pool2d(const Tensor& x, std::array<std::size_t, 2> kernel, std::array<std::size_t, 2> stride,
                  std::array<std::size_t, 2> padding) {
    const geometry g = check("max_pool2d", x, kernel, stride, padding);
    if (x.size() > std::numeric_limits<std::uint32_t>::max())
        throw shape_error("max_pool2d: input " + x.shape().to_string() + " has more than 2^32 - 1 elements");
    const std::size_t out = g.ho * g.wo;
    // The argmax of every window, found once: the backward pass routes the gradient through the same indices.
    // Not zeroed first (the forward pass writes every one; zeroing was a pass on one thread).
    std::shared_ptr<std::uint32_t[]> idx = std::make_shared_for_overwrite<std::uint32_t[]>(g.planes * out);
    const Tensor y = pool_forward(g, x, [&](std::size_t first, std::size_t planes, const float* xf, float* v) {
        // at the vector width of the level in use; y exact: elements of x
        detail::vectorized([&] { argmax(g, xf, first, planes, idx.get() + first * out, v); });
    });
    if (should_record({&x}))
        record(y, {&x}, [g, shape = x.shape(), dtype = x.dtype(), idx = std::move(idx)](const Tensor& dy) {
            const std::size_t in = g.h * g.w, out = g.ho * g.wo;
            return Gradients{pool_backward(
                g, shape, dtype, dy, [&](std::size_t first, std::size_t planes, const float* d, float* v) {
                    const std::uint32_t* at = idx.get() + first * out;
                    if (g.two_by_two()) {
                        detail::vectorized([&] { gradient_2x2(g, at, d, first, planes, v); });
                        return;
                    }
                    // windows may overlap: sum into zeros in output order
                    std::fill_n(v, planes * in, 0.0f);
                    for (std::size_t i = 0; i < planes * out; ++i) v[at[i] - first * in] += d[i];
                })};
        });
    return y;
}

Tensor avg_pool2d(const Tensor& x, std::array<std::size_t, 2> kernel, std::array<std::size_t, 2> stride,
                  std::array<std::size_t, 2> padding) {
    const geometry g = check("avg_pool2d", x, kernel, stride, padding);
    const std::size_t in = g.h * g.w;
    // each window's elements inside x, as a float
    const auto count = [](const window& v) { return static_cast<float>((v.r1 - v.r0) * (v.c1 - v.c0)); };
    const Tensor y = pool_forward(g, x, [&](std::size_t, std::size_t planes, const float* xf, float* v) {
        for (std::size_t pl = 0; pl < planes; ++pl, xf += in)
            for (std::size_t i = 0; i < g.ho; ++i)
                for (std::size_t j = 0; j < g.wo; ++j) {
                    const window w = g.at(i, j);
                    float s = 0;
                    for (std::size_t r = w.r0; r < w.r1; ++r)
                        for (std::size_t c = w.c0; c < w.c1; ++c) s += xf[r * g.w + c];
                    *v++ = s / count(w);
                }
    });
    if (should_record({&x}))
        record(y, {&x}, [shape = x.shape(), dtype = x.dtype(), g, count](const Tensor& dy) {
            return Gradients{
                pool_backward(g, shape, dtype, dy, [&](std::size_t, std::size_t planes, const float* d, float* v) {
                    std::fill_n(v, planes * g.h * g.w, 0.0f);
                    for (std::size_t pl = 0; pl < planes; ++pl, v += g.h * g.w)
                        for (std::size_t i = 0; i < g.ho; ++i)
                            for (std::size_t j = 0; j < g.wo; ++j) {
                                const window w = g.at(i, j);
                                const float share = *d++ / count(w);
                                for (std::size_t r = w.r0; r < w.r1; ++r)
                                    for (std::size_t c = w.c0; c < w.c1; ++c) v[r * g.w + c] += share;
                            }
                })};
        });
    return y;
}

} // namespace mixprec::autodiff
