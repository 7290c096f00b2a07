#include <mixprec/autodiff/ops_reduce.hpp>

#include <mixprec/autodiff/tape.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

namespace mixprec::autodiff {
namespace {

/// Where each element of x lands in the reduced result.
struct Plan {
    Shape kept;                                        // x's shape with the reduced axes set to 1
    Shape out;                                         // kept, or without the reduced axes
    std::array<std::size_t, Shape::max_rank> stride{}; // per x axis: stride in `kept`, 0 if reduced
    std::size_t count = 1;                             // elements reduced into each output
};

std::string axes_string(const std::vector<int>& axes) {
    std::string s;
    for (int a : axes) s += (s.empty() ? "" : ", ") + std::to_string(a);
    return "(" + s + ")";
}

Plan make_plan(const Shape& shape, const std::vector<int>& axes, bool keepdims, const char* op) {
    const long rank = static_cast<long>(shape.rank());
    std::array<bool, Shape::max_rank> reduced{};
    if (axes.empty()) reduced.fill(true);
    for (int axis : axes) {
        const long a = axis < 0 ? axis + rank : axis;
        if (a < 0 || a >= rank)
            throw shape_error(std::string(op) + ": axis " + std::to_string(axis) + " in " + axes_string(axes) +
                              " is out of range for shape " + shape.to_string());
        if (reduced[static_cast<std::size_t>(a)])
            throw shape_error(std::string(op) + ": axis " + std::to_string(axis) + " repeats in " + axes_string(axes) +
                              " for shape " + shape.to_string());
        reduced[static_cast<std::size_t>(a)] = true;
    }
    Plan p;
    std::array<std::size_t, Shape::max_rank> kept{}, out{};
    std::size_t out_rank = 0;
    for (std::size_t i = 0; i < shape.rank(); ++i) {
        kept[i] = reduced[i] ? 1 : shape[i];
        if (reduced[i]) p.count *= shape[i];
        if (!reduced[i] || keepdims) out[out_rank++] = kept[i];
    }
    p.kept = Shape(std::span<const std::size_t>(kept.data(), shape.rank()));
    p.out = Shape(std::span<const std::size_t>(out.data(), out_rank));
    for (std::size_t i = shape.rank(), step = 1; i-- > 0;) {
        p.stride[i] = reduced[i] ? 0 : step;
        step *= kept[i];
    }
    return p;
}

/// Calls f(i, o) for every element i of x (row-major) and the output element o it reduces into.
template <class F>
void for_each_element(const Shape& shape, const Plan& p, F f) {
    std::array<std::size_t, Shape::max_rank> index{};
    std::size_t o = 0;
    for (std::size_t i = 0; i < shape.elements(); ++i) {
        f(i, o);
        for (std::size_t a = shape.rank(); a-- > 0;) {
            o += p.stride[a];
            if (++index[a] < shape[a]) break;
            o -= p.stride[a] * index[a];
            index[a] = 0;
        }
    }
}

/// v rounded to float32 so that narrowing it to `dtype` afterwards rounds v only once: to nearest for
/// float32, to odd otherwise (float32 keeps more than two bits beyond any narrow format).
float round_once_for(double v, Dtype dtype) {
    float f = static_cast<float>(v);
    if (dtype == Dtype::float32 || !std::isfinite(f) || double(f) == v) return f;
    if (std::fabs(double(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u);
}

/// Σ x over the plan's axes, divided by `divisor`, rounded once to x's dtype.
Tensor sum_divided(const Tensor& x, const Plan& p, double divisor) {
    const std::vector<float> v = x.to_floats();
    std::vector<double> acc(p.kept.elements(), 0.0);
    for_each_element(x.shape(), p, [&](std::size_t i, std::size_t o) { acc[o] += v[i]; });
    std::vector<float> out(acc.size());
    for (std::size_t o = 0; o < acc.size(); ++o) out[o] = round_once_for(acc[o] / divisor, x.dtype());
    return Tensor::from_floats(p.out, out, x.dtype());
}

/// dx[i] = f(dy[o], i, o), rounded once to dy's dtype.
template <class F>
Tensor spread(const Tensor& dy, const Shape& shape, const Plan& p, F f) {
    const std::vector<float> g = dy.to_floats();
    std::vector<float> dx(shape.elements());
    for_each_element(shape, p, [&](std::size_t i, std::size_t o) { dx[i] = f(g[o], i, o); });
    return Tensor::from_floats(shape, dx, dy.dtype());
}

} // namespace

Tensor sum(const Tensor& x, std::vector<int> axes, bool keepdims) {
    const Plan p = make_plan(x.shape(), axes, keepdims, "sum");
    Tensor y = sum_divided(x, p, 1.0);
    if (should_record({&x}))
        record(y, {&x}, [p, shape = x.shape()](const Tensor& dy) {
            return Gradients{spread(dy, shape, p, [](float g, std::size_t, std::size_t) { return g; })};
        });
    return y;
}

Tensor mean(const Tensor& x, std::vector<int> axes, bool keepdims) {
    const Plan p = make_plan(x.shape(), axes, keepdims, "mean");
    Tensor y = sum_divided(x, p, static_cast<double>(p.count));
    if (should_record({&x}))
        record(y, {&x}, [p, shape = x.shape()](const Tensor& dy) {
            const float n = static_cast<float>(p.count);
            return Gradients{spread(dy, shape, p, [n](float g, std::size_t, std::size_t) { return g / n; })};
        });
    return y;
}

Tensor max(const Tensor& x, std::vector<int> axes, bool keepdims) {
    const Plan p = make_plan(x.shape(), axes, keepdims, "max");
    if (p.count == 0 && p.kept.elements() > 0)
        throw shape_error("max: cannot reduce over axes " + axes_string(axes) + " of shape " + x.shape().to_string() +
                          ", which hold no elements");
    const std::vector<float> v = x.to_floats();
    std::vector<float> m(p.kept.elements(), -std::numeric_limits<float>::infinity());
    for_each_element(x.shape(), p, [&](std::size_t i, std::size_t o) {
        if (std::isnan(v[i]) || v[i] > m[o]) m[o] = v[i]; // a NaN, once in, stays
    });
    Tensor y = Tensor::from_floats(p.out, m, x.dtype()); // exact: every m is an element of x
    if (should_record({&x}))
        record(y, {&x}, [p, x, m](const Tensor& dy) {
            const std::vector<float> v = x.to_floats();
            const auto is_max = [&](std::size_t i, std::size_t o) {
                return v[i] == m[o] || (std::isnan(v[i]) && std::isnan(m[o]));
            };
            std::vector<float> ties(m.size(), 0.0f);
            for_each_element(x.shape(), p,
                             [&](std::size_t i, std::size_t o) { ties[o] += is_max(i, o) ? 1.0f : 0.0f; });
            return Gradients{spread(dy, x.shape(), p, [&](float g, std::size_t i, std::size_t o) {
                return is_max(i, o) ? g / ties[o] : 0.0f;
            })};
        });
    return y;
}

std::vector<std::int64_t> argmax(const Tensor& x, int axis) {
    const Plan p = make_plan(x.shape(), {axis}, false, "argmax");
    const std::size_t a = static_cast<std::size_t>(axis < 0 ? axis + static_cast<int>(x.rank()) : axis);
    const std::size_t n = x.shape()[a];
    if (n == 0)
        throw shape_error("argmax: axis " + std::to_string(axis) + " of shape " + x.shape().to_string() +
                          " has length 0, so it has no largest element");
    std::size_t inner = 1;
    for (std::size_t i = a + 1; i < x.rank(); ++i) inner *= x.shape()[i];
    const std::vector<float> v = x.to_floats();
    std::vector<std::int64_t> out(p.out.elements());
    for (std::size_t o = 0; o < out.size(); ++o) {
        const float* first = v.data() + (o / inner) * n * inner + o % inner; // x[o / inner, 0, o % inner]
        std::size_t best = 0;
        for (std::size_t k = 1; k < n && !std::isnan(first[best * inner]); ++k)
            if (std::isnan(first[k * inner]) || first[k * inner] > first[best * inner]) best = k;
        out[o] = static_cast<std::int64_t>(best);
    }
    return out;
}

} // namespace mixprec::autodiff
