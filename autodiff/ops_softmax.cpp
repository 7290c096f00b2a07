#include <mixprec/autodiff/ops_softmax.hpp>

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/detail/vector_math.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

namespace mixprec::autodiff {
namespace {

/// The 1-D lanes along an axis: lane (o, i) holds elements o·len·inner + i + k·inner, k < len.
struct Lanes {
    std::size_t outer = 1, len = 1, inner = 1;

    /// f(first element, stride) for every lane, lanes spread over the threads from 32 Ki elements each
    /// (each lane is computed alone, so the bits do not depend on the split).
    template <class F>
    void for_each(F f) const {
        const std::size_t per_outer = std::max<std::size_t>(len * inner, 1);
        detail::split(outer, std::max<std::size_t>((std::size_t{1} << 15) / per_outer, 1),
                      [&](std::size_t o0, std::size_t o1) {
                          for (std::size_t o = o0; o < o1; ++o)
                              for (std::size_t i = 0; i < inner; ++i) f(o * len * inner + i, inner);
                      });
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
        if (i < a)
            l.outer *= d;
        else if (i == a)
            l.len = d;
        else
            l.inner *= d;
    }
    return l;
}

/// softmax(x) along the lanes, in float32, into p; and log softmax into logp when it is not null.
/// exp is mixprec's vectorizable one (autodiff/tensor/detail/vector_math.hpp, within 1 ulp).
void softmax_floats(const std::vector<float>& x, const Lanes& l, std::vector<float>& p, std::vector<float>* logp) {
    l.for_each([&](std::size_t first, std::size_t step) {
        float m = -std::numeric_limits<float>::infinity();
        for (std::size_t k = 0; k < l.len; ++k) m = std::max(m, x[first + k * step]);
        float s = 0.0f;
        for (std::size_t k = 0; k < l.len; ++k) {
            const std::size_t j = first + k * step;
            p[j] = detail::exp(x[j] - m);
            s += p[j];
        }
        const float log_s = std::log(s);
        for (std::size_t k = 0; k < l.len; ++k) {
            const std::size_t j = first + k * step;
            if (logp) (*logp)[j] = (x[j] - m) - log_s;
            p[j] /= s;
        }
    });
}

/// Rounds once to x's dtype and records `backward(p, dy)` (p = softmax(x) in float32, kept from the
/// forward pass; dy widened), which writes dx over dy lane by lane.
template <class B>
Tensor finish(const Tensor& x, const Lanes& l, bool log, B backward) {
    const std::vector<float> xf = x.to_floats();
    auto p = std::make_shared<std::vector<float>>(xf.size());
    std::vector<float> logp(log ? xf.size() : 0);
    softmax_floats(xf, l, *p, log ? &logp : nullptr);
    Tensor y = Tensor::from_floats(x.shape(), log ? logp : *p, x.dtype());
    if (should_record({&x}))
        record(y, {&x}, [x_shape = x.shape(), p, l, backward](const Tensor& dy) {
            std::vector<float> g = dy.to_floats();
            l.for_each([&](std::size_t first, std::size_t step) { backward(*p, g, first, step, l.len); });
            return Gradients{Tensor::from_floats(x_shape, g, dy.dtype())};
        });
    return y;
}

} // namespace

Tensor softmax(const Tensor& x, int axis) {
    const Lanes l = lanes_of(x.shape(), axis, "softmax");
    return finish(
        x, l, false,
        [](const std::vector<float>& p, std::vector<float>& g, std::size_t first, std::size_t step, std::size_t len) {
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
    return finish(
        x, l, true,
        [](const std::vector<float>& p, std::vector<float>& g, std::size_t first, std::size_t step, std::size_t len) {
            float total = 0.0f; // Σ dy
            for (std::size_t k = 0; k < len; ++k) total += g[first + k * step];
            for (std::size_t k = 0; k < len; ++k) {
                const std::size_t j = first + k * step;
                g[j] -= p[j] * total;
            }
        });
}

} // namespace mixprec::autodiff
