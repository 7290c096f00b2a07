#include "ops_softmax.hpp"

#include "tape.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace mixprec::autodiff {
namespace {

/// The 1-D lanes along an axis: lane (o, i) holds elements o·len·inner + i + k·inner, k < len.
struct Lanes {
    std::size_t outer = 1, len = 1, inner = 1;

    template <class F>
    void for_each(F f) const { // f(first element, stride)
        for (std::size_t o = 0; o < outer; ++o)
            for (std::size_t i = 0; i < inner; ++i) f(o * len * inner + i, inner);
    }
};

Lanes lanes_of(const Shape& shape, int axis, const char* op) {
    const long r = static_cast<long>(shape.rank());
    const long a = axis < 0 ? axis + r : axis;
    if (a < 0 || a >= r)
        throw shape_error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for shape " +
                          shape.to_string());
    Lanes l;
    for (long i = 0; i < r; ++i) {
        const std::size_t d = shape[static_cast<std::size_t>(i)];
        if (i < a) l.outer *= d;
        else if (i == a) l.len = d;
        else l.inner *= d;
    }
    return l;
}

/// softmax(x) (or log softmax when `log`) along the lanes, in float32.
std::vector<float> softmax_floats(const std::vector<float>& x, const Lanes& l, bool log) {
    std::vector<float> y(x.size());
    l.for_each([&](std::size_t first, std::size_t step) {
        float m = -std::numeric_limits<float>::infinity();
        for (std::size_t k = 0; k < l.len; ++k) m = std::max(m, x[first + k * step]);
        float s = 0.0f;
        for (std::size_t k = 0; k < l.len; ++k) {
            const std::size_t j = first + k * step;
            y[j] = std::exp(x[j] - m);
            s += y[j];
        }
        const float log_s = std::log(s);
        for (std::size_t k = 0; k < l.len; ++k) {
            const std::size_t j = first + k * step;
            y[j] = log ? (x[j] - m) - log_s : y[j] / s;
        }
    });
    return y;
}

/// Rounds once to x's dtype and records `backward(p, dy)` (p = softmax(x) in float32, dy widened),
/// which writes dx over dy lane by lane.
template <class B>
Tensor finish(const Tensor& x, const Lanes& l, bool log, B backward) {
    Tensor y = Tensor::from_floats(x.shape(), softmax_floats(x.to_floats(), l, log), x.dtype());
    if (should_record({&x}))
        record(y, {&x}, [x, l, backward](const Tensor& dy) {
            const std::vector<float> p = softmax_floats(x.to_floats(), l, false);
            std::vector<float> g = dy.to_floats();
            l.for_each([&](std::size_t first, std::size_t step) { backward(p, g, first, step, l.len); });
            return Gradients{Tensor::from_floats(x.shape(), g, dy.dtype())};
        });
    return y;
}

} // namespace

Tensor softmax(const Tensor& x, int axis) {
    const Lanes l = lanes_of(x.shape(), axis, "softmax");
    return finish(x, l, false, [](const std::vector<float>& p, std::vector<float>& g, std::size_t first,
                                  std::size_t step, std::size_t len) {
        float dot = 0.0f; // Σ dy ⊙ y
        for (std::size_t k = 0; k < len; ++k) dot += g[first + k * step] * p[first + k * step];
        for (std::size_t k = 0; k < len; ++k) {
            const std::size_t j = first + k * step;
            g[j] = p[j] * (g[j] - dot);
        }
    });
}

Tensor log_softmax(const Tensor& x, int axis) {
    const Lanes l = lanes_of(x.shape(), axis, "log_softmax");
    return finish(x, l, true, [](const std::vector<float>& p, std::vector<float>& g, std::size_t first,
                                 std::size_t step, std::size_t len) {
        float total = 0.0f; // Σ dy
        for (std::size_t k = 0; k < len; ++k) total += g[first + k * step];
        for (std::size_t k = 0; k < len; ++k) {
            const std::size_t j = first + k * step;
            g[j] -= p[j] * total;
        }
    });
}

} // namespace mixprec::autodiff
