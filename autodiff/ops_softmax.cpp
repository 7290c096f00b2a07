#include <mixprec/autodiff/ops_softmax.hpp>

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/detail/softmax_lane.hpp>

#include <algorithm>
#include <memory>
#include <span>
#include <string>

namespace mixprec::autodiff {
namespace {

/// The 1-D lanes along an axis: lane (o, i) holds elements o·len·inner + i + k·inner, k < len.
struct Lanes {
    std::size_t outer = 1, len = 1, inner = 1;

    /// f(first element, stride) for every lane, lanes spread over the threads from 32 Ki elements each
    /// (each lane is computed alone, so the bits do not depend on the split), each thread's lanes in the
    /// copy compiled for the level in use (isa_kernels.hpp: its exp loops vectorize, with the same bits).
    template <class F>
    void for_each(F f) const {
        const std::size_t per_outer = std::max<std::size_t>(len * inner, 1);
        detail::split(outer, std::max<std::size_t>((std::size_t{1} << 15) / per_outer, 1),
                      [&](std::size_t o0, std::size_t o1) {
                          detail::vectorized([&] {
                              for (std::size_t o = o0; o < o1; ++o)
                                  for (std::size_t i = 0; i < inner; ++i) f(o * len * inner + i, inner);
                          });
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

/// x's elements as float32: its own storage when it is float32, else widened into `copy`.
const float* floats_of(const Tensor& x, std::vector<float>& copy) {
    if (x.dtype() == Dtype::float32) return static_cast<const float*>(x.raw());
    copy = x.to_floats();
    return copy.data();
}

/// Rounds once to x's dtype and records `backward(p, dy, dx, step, len)` (p = softmax(x) in float32, kept
/// from the forward pass; dy widened), which writes one lane of dx in float32, rounded once afterwards.
template <class B>
Tensor finish(const Tensor& x, const Lanes& l, bool log, B backward) {
    std::vector<float> widened;
    const float* xf = floats_of(x, widened);
    // p: y itself for a float32 softmax, else float32 storage of its own
    const bool p_is_y = x.dtype() == Dtype::float32 && !log;
    Tensor y = Tensor::uninitialized(x.shape(), x.dtype());
    std::shared_ptr<float[]> own = p_is_y ? nullptr : std::make_shared_for_overwrite<float[]>(x.size());
    float* p = p_is_y ? static_cast<float*>(y.raw()) : own.get();
    std::vector<float> logp(log ? x.size() : 0);
    l.for_each([&](std::size_t first, std::size_t step) {
        detail::softmax_lane(xf + first, p + first, log ? logp.data() + first : nullptr, l.len, step);
    });
    if (!p_is_y)
        y = Tensor::from_floats(x.shape(), log ? std::span<const float>(logp) : std::span(p, x.size()), x.dtype());
    if (should_record({&x})) {
        const Tensor kept = p_is_y ? y : Tensor();
        record(y, {&x}, [x_shape = x.shape(), kept, own, l, backward](const Tensor& dy) {
            const float* pr = own ? own.get() : static_cast<const float*>(kept.raw());
            std::vector<float> widened_dy;
            const float* g = floats_of(dy, widened_dy);
            Tensor dx = Tensor::uninitialized(x_shape, Dtype::float32);
            float* out = static_cast<float*>(dx.raw());
            l.for_each([&](std::size_t first, std::size_t step) {
                backward(pr + first, g + first, out + first, step, l.len);
            });
            return Gradients{dx.to(dy.dtype())};
        });
    }
    return y;
}

} // namespace

Tensor softmax(const Tensor& x, int axis) {
    const Lanes l = lanes_of(x.shape(), axis, "softmax");
    return finish(x, l, false, [](const float* p, const float* dy, float* dx, std::size_t step, std::size_t len) {
        detail::softmax_backward_lane(p, dy, dx, len, step);
    });
}

Tensor log_softmax(const Tensor& x, int axis) {
    const Lanes l = lanes_of(x.shape(), axis, "log_softmax");
    return finish(x, l, true, [](const float* p, const float* dy, float* dx, std::size_t step, std::size_t len) {
        float total = 0.0f; // Σ dy
        for (std::size_t k = 0; k < len; ++k) total += dy[k * step];
        for (std::size_t k = 0; k < len; ++k) dx[k * step] = dy[k * step] - p[k * step] * total;
    });
}

} // namespace mixprec::autodiff
