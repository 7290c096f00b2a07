#include <mixprec/autodiff/ops_pool.hpp>

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
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

/// Whether `value` should replace `best` as a window's maximum: larger, or the first NaN (a NaN compares
/// unequal to itself).
inline bool better(float value, float best) { return (value > best) | ((value != value) & (best == best)); }

/// better() as a mask, all ones or 0: the 2×2 path picks with it instead of branching, which would
/// mispredict on every other window of random data.
inline std::uint32_t replaces(float value, float best) { return 0u - static_cast<std::uint32_t>(better(value, best)); }
inline float pick(std::uint32_t mask, float a, float b) {
    return std::bit_cast<float>((mask & std::bit_cast<std::uint32_t>(a)) | (~mask & std::bit_cast<std::uint32_t>(b)));
}

/// One output row of argmax for 2×2 windows with stride 2 and no padding (the common case): rows r0 and r1
/// of a plane in, window j's index in the plane out (plus `base`). The same scan order and NaN rule as the
/// general loop, with fixed bounds and no branches.
void argmax_2x2_row(const float* __restrict r0, const float* __restrict r1, std::size_t wo, std::uint32_t base,
                    std::uint32_t w, std::uint32_t* __restrict out) {
    for (std::size_t j = 0; j < wo; ++j) {
        const float b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
        float best = r0[2 * j];
        std::uint32_t offset = 0;
        std::uint32_t m = replaces(b, best);
        best = pick(m, b, best);
        offset = (m & 1u) | (~m & offset);
        m = replaces(c, best);
        best = pick(m, c, best);
        offset = (m & w) | (~m & offset);
        m = replaces(d, best);
        offset = (m & (w + 1)) | (~m & offset);
        out[j] = base + static_cast<std::uint32_t>(2 * j) + offset;
    }
}

void argmax_2x2(const geometry& g, const float* x, std::uint32_t* out) {
    for (std::size_t pl = 0; pl < g.planes; ++pl)
        for (std::size_t i = 0; i < g.ho; ++i, out += g.wo) {
            const std::size_t row = pl * g.h * g.w + 2 * i * g.w;
            argmax_2x2_row(x + row, x + row + g.w, g.wo, static_cast<std::uint32_t>(row),
                           static_cast<std::uint32_t>(g.w), out);
        }
}

/// Index in x of the max of each window (first on ties, first NaN wins), for every output element.
std::vector<std::uint32_t> argmax(const geometry& g, const float* x) {
    std::vector<std::uint32_t> idx(g.planes * g.ho * g.wo);
    std::uint32_t* out = idx.data();
    const std::array<std::size_t, 2> two{2, 2}, none{0, 0};
    if (g.kernel == two && g.stride == two && g.padding == none) {
        argmax_2x2(g, x, out);
        return idx;
    }
    for (std::size_t pl = 0; pl < g.planes; ++pl) {
        const float* plane = x + pl * g.h * g.w;
        const auto base = static_cast<std::uint32_t>(pl * g.h * g.w);
        for (std::size_t i = 0; i < g.ho; ++i)
            for (std::size_t j = 0; j < g.wo; ++j) {
                const window v = g.at(i, j);
                std::size_t best_at = v.r0 * g.w + v.c0;
                float best = -std::numeric_limits<float>::infinity();
                for (std::size_t r = v.r0; r < v.r1; ++r)
                    for (std::size_t c = v.c0; c < v.c1; ++c) {
                        const float value = plane[r * g.w + c];
                        const bool b = better(value, best);
                        best = b ? value : best;
                        best_at = b ? r * g.w + c : best_at;
                    }
                *out++ = base + static_cast<std::uint32_t>(best_at);
            }
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
    if (x.size() > std::numeric_limits<std::uint32_t>::max())
        throw shape_error("max_pool2d: input " + x.shape().to_string() + " has more than 2^32 - 1 elements");
    std::vector<float> xs;
    const float* xf = floats_of(x, xs);
    // The argmax of every window, found once: the backward pass routes the gradient through the same indices.
    auto idx = std::make_shared<const std::vector<std::uint32_t>>(argmax(g, xf));
    std::vector<float> y(idx->size());
    for (std::size_t i = 0; i < idx->size(); ++i) y[i] = xf[(*idx)[i]];
    Tensor out = Tensor::from_floats(output_shape(x, g), y, x.dtype()); // exact: every y is an element of x
    if (should_record({&x}))
        record(out, {&x}, [shape = x.shape(), dtype = x.dtype(), idx](const Tensor& dy) {
            std::vector<float> dys, dx(shape.elements(), 0.0f);
            const float* d = floats_of(dy, dys);
            for (std::size_t i = 0; i < idx->size(); ++i) dx[(*idx)[i]] += d[i];
            return Gradients{Tensor::from_floats(shape, dx, dtype)};
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
