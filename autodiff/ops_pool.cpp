#include <mixprec/autodiff/ops_pool.hpp>

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <algorithm>
#include <bit>
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

/// Whether `value` should replace `best` as a window's maximum: larger, or the first NaN (a NaN compares
/// unequal to itself).
inline bool better(float value, float best) { return (value > best) | ((value != value) & (best == best)); }

/// better() as a mask, all ones or 0: the 2×2 path picks with it instead of branching, which would
/// mispredict on every other window of random data.
inline std::uint32_t replaces(float value, float best) { return 0u - static_cast<std::uint32_t>(better(value, best)); }
inline float pick(std::uint32_t mask, float a, float b) {
    return std::bit_cast<float>((mask & std::bit_cast<std::uint32_t>(a)) | (~mask & std::bit_cast<std::uint32_t>(b)));
}

/// Outputs [0, n) of one output row of argmax for 2×2 windows with stride 2 and no padding (the common
/// case): rows r0 and r1 of a plane in, window j's index in the plane (plus `base`) and its value out. The
/// same scan order and NaN rule as the general loop, with fixed bounds and no branches: for a constant n,
/// GCC turns it into a few vector operations.
template <std::size_t n>
[[gnu::always_inline]] inline void argmax_2x2_run(const float* __restrict r0, const float* __restrict r1,
                                                  std::uint32_t base, std::uint32_t w, std::uint32_t* __restrict out,
                                                  float* __restrict max) {
    for (std::size_t j = 0; j < n; ++j) {
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
        max[j] = pick(m, d, best);
        offset = (m & (w + 1)) | (~m & offset);
        out[j] = base + static_cast<std::uint32_t>(2 * j) + offset;
    }
}

/// run(integral_constant<n>, j) over windows [0, wo) of an output row, in runs of n = 8 (or 4, or 1)
/// windows starting at j. The rows of the cnn model's pools are short (13 and 5 windows): a loop over wo left
/// them to scalar code below one vector of AVX-512. Each window's results depend on its own elements only,
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

void argmax_2x2_row(const float* r0, const float* r1, std::size_t wo, std::uint32_t base, std::uint32_t w,
                    std::uint32_t* out, float* max) {
    in_runs(wo, [&]<std::size_t n>(std::integral_constant<std::size_t, n>, std::size_t j) {
        argmax_2x2_run<n>(r0 + 2 * j, r1 + 2 * j, base + static_cast<std::uint32_t>(2 * j), w, out + j, max + j);
    });
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

/// dx of `planes` planes (starting at plane `first`, `v` at its first element) for 2×2 windows with
/// stride 2 and no padding, written once, without zeroing first: the elements of an odd last row or
/// column are in no window and get 0.
void gradient_2x2(const geometry& g, const std::uint32_t* at, const float* d, std::size_t first, std::size_t planes,
                  float* v) {
    const auto w = static_cast<std::uint32_t>(g.w);
    for (std::size_t pl = 0; pl < planes; ++pl, v += g.h * g.w) {
        const auto base = static_cast<std::uint32_t>((first + pl) * g.h * g.w);
        for (std::size_t i = 0; i < g.ho; ++i, at += g.wo, d += g.wo) {
            float* r0 = v + 2 * i * g.w;
            float* r1 = r0 + g.w;
            const std::uint32_t row = base + static_cast<std::uint32_t>(2 * i * g.w);
            in_runs(g.wo, [&]<std::size_t n>(std::integral_constant<std::size_t, n>, std::size_t j) {
                gradient_2x2_run<n>(at + j, d + j, row + static_cast<std::uint32_t>(2 * j), w, r0 + 2 * j, r1 + 2 * j);
            });
            for (std::size_t c = 2 * g.wo; c < g.w; ++c) r0[c] = r1[c] = 0.0f;
        }
        std::fill(v + 2 * g.ho * g.w, v + g.h * g.w, 0.0f);
    }
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
                argmax_2x2_row(plane + 2 * i * g.w, plane + (2 * i + 1) * g.w, g.wo,
                               base + static_cast<std::uint32_t>(2 * i * g.w), static_cast<std::uint32_t>(g.w), out,
                               max);
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
                        const bool b = better(value, best);
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
