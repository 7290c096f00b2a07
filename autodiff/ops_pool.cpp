#include "ops_pool.hpp"

#include "convert.hpp"
#include "tape.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace mixprec::autodiff {
namespace {

struct window {
    std::size_t r0, r1, c0, c1; // rows [r0, r1) and columns [c0, c1) of x inside the window
};

struct geometry {
    std::size_t planes, h, w, ho, wo; // planes = N·C
    std::array<std::size_t, 2> kernel, stride, padding;

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
    if (kernel[0] == 0 || kernel[1] == 0) throw shape_error(what + ": kernel " + pair_text(kernel) + " must be at least 1");
    for (int a = 0; a < 2; ++a)
        if (stride[a] == 0) stride[a] = kernel[a];
    geometry g{x.shape()[0] * x.shape()[1], x.shape()[2], x.shape()[3], 0, 0, kernel, stride, padding};
    const std::size_t in[2] = {g.h, g.w};
    std::size_t out[2];
    for (int a = 0; a < 2; ++a) {
        if (2 * padding[a] > kernel[a])
            throw shape_error(what + ": padding " + pair_text(padding) + " exceeds half the kernel " + pair_text(kernel));
        if (in[a] + 2 * padding[a] < kernel[a])
            throw shape_error(what + " padded by " + pair_text(padding) + " is smaller than the kernel " +
                              pair_text(kernel));
        out[a] = (in[a] + 2 * padding[a] - kernel[a]) / stride[a] + 1;
    }
    g.ho = out[0];
    g.wo = out[1];
    return g;
}

/// Index in x of the max of each window (first on ties, first NaN wins), for every output element.
std::vector<std::size_t> argmax(const geometry& g, const float* x) {
    std::vector<std::size_t> idx(g.planes * g.ho * g.wo);
    std::size_t* out = idx.data();
    for (std::size_t pl = 0; pl < g.planes; ++pl)
        for (std::size_t i = 0; i < g.ho; ++i)
            for (std::size_t j = 0; j < g.wo; ++j) {
                const window v = g.at(i, j);
                std::size_t best_at = pl * g.h * g.w + v.r0 * g.w + v.c0;
                float best = -std::numeric_limits<float>::infinity();
                for (std::size_t r = v.r0; r < v.r1; ++r)
                    for (std::size_t c = v.c0; c < v.c1; ++c) {
                        const std::size_t a = pl * g.h * g.w + r * g.w + c;
                        if (x[a] > best || (std::isnan(x[a]) && !std::isnan(best))) best = x[a], best_at = a;
                    }
                *out++ = best_at;
            }
    return idx;
}

const float* floats_of(const Tensor& t, std::vector<float>& scratch) {
    if (t.dtype() == Dtype::float32) return static_cast<const float*>(t.raw());
    scratch.resize(t.size());
    widen(t.raw(), t.dtype(), scratch.data(), t.size());
    return scratch.data();
}

Shape output_shape(const Tensor& x, const geometry& g) { return Shape{x.shape()[0], x.shape()[1], g.ho, g.wo}; }

} // namespace

Tensor max_pool2d(const Tensor& x, std::array<std::size_t, 2> kernel, std::array<std::size_t, 2> stride,
                  std::array<std::size_t, 2> padding) {
    const geometry g = check("max_pool2d", x, kernel, stride, padding);
    std::vector<float> xs;
    const float* xf = floats_of(x, xs);
    const std::vector<std::size_t> idx = argmax(g, xf);
    std::vector<float> y(idx.size());
    for (std::size_t i = 0; i < idx.size(); ++i) y[i] = xf[idx[i]];
    Tensor out = Tensor::from_floats(output_shape(x, g), y, x.dtype()); // exact: every y is an element of x
    if (should_record({&x}))
        record(out, {&x}, [x, g](const Tensor& dy) {
            std::vector<float> xs, dys, dx(x.size(), 0.0f);
            const std::vector<std::size_t> idx = argmax(g, floats_of(x, xs));
            const float* d = floats_of(dy, dys);
            for (std::size_t i = 0; i < idx.size(); ++i) dx[idx[i]] += d[i];
            return Gradients{Tensor::from_floats(x.shape(), dx, x.dtype())};
        });
    return out;
}

Tensor avg_pool2d(const Tensor& x, std::array<std::size_t, 2> kernel, std::array<std::size_t, 2> stride,
                  std::array<std::size_t, 2> padding) {
    const geometry g = check("avg_pool2d", x, kernel, stride, padding);
    std::vector<float> xs, y(g.planes * g.ho * g.wo);
    const float* xf = floats_of(x, xs);
    float* out_at = y.data();
    for (std::size_t pl = 0; pl < g.planes; ++pl)
        for (std::size_t i = 0; i < g.ho; ++i)
            for (std::size_t j = 0; j < g.wo; ++j) {
                const window v = g.at(i, j);
                float s = 0;
                for (std::size_t r = v.r0; r < v.r1; ++r)
                    for (std::size_t c = v.c0; c < v.c1; ++c) s += xf[pl * g.h * g.w + r * g.w + c];
                *out_at++ = s / static_cast<float>((v.r1 - v.r0) * (v.c1 - v.c0));
            }
    Tensor out = Tensor::from_floats(output_shape(x, g), y, x.dtype());
    if (should_record({&x}))
        record(out, {&x}, [shape = x.shape(), dtype = x.dtype(), g](const Tensor& dy) {
            std::vector<float> dys, dx(shape.elements(), 0.0f);
            const float* d = floats_of(dy, dys);
            for (std::size_t pl = 0; pl < g.planes; ++pl)
                for (std::size_t i = 0; i < g.ho; ++i)
                    for (std::size_t j = 0; j < g.wo; ++j) {
                        const window v = g.at(i, j);
                        const float share = *d++ / static_cast<float>((v.r1 - v.r0) * (v.c1 - v.c0));
                        for (std::size_t r = v.r0; r < v.r1; ++r)
                            for (std::size_t c = v.c0; c < v.c1; ++c) dx[pl * g.h * g.w + r * g.w + c] += share;
                    }
            return Gradients{Tensor::from_floats(shape, dx, dtype)};
        });
    return out;
}

} // namespace mixprec::autodiff
