#include <mixprec/autodiff/ops_elementwise.hpp>

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>
#include <mixprec/autodiff/tensor/detail/vector_math.hpp>
#include <mixprec/autodiff/tensor/kernels_elementwise.hpp>

#include <cmath>

namespace mixprec::autodiff {
namespace {

using kernels::detail::map;
using kernels::detail::zip;

/// Records a unary op whose derivative is a function of (x, y): dx = dy * d(x, y).
template <class D>
Tensor unary_op(const Tensor& x, Tensor y, D derivative) {
    if (should_record({&x}))
        record(y, {&x}, [x, y, derivative](const Tensor& dy) {
            return Gradients{kernels::detail::zip3(
                dy, x, y, x.dtype(), [derivative](float g, float u, float v) { return g * derivative(u, v); })};
        });
    return y;
}

/// Gradient of a broadcast input: the chunk-wise product rounded once, then summed back to `shape`.
Tensor unbroadcast(const Tensor& g, const Shape& shape) { return kernels::sum_to_shape(g, shape); }

/// GELU, tanh form: gelu(u) = ½u(1 + t) with t = tanh(k(u + c u³)), and its derivative
/// ½(1 + t) + ½u(1 − t²) k(1 + 3c u²).
constexpr float gelu_k = 0.7978845608028654f; // √(2/π)
constexpr float gelu_c = 0.044715f;

float gelu_value(float u) { return 0.5f * u * (1.0f + detail::tanh(gelu_k * (u + gelu_c * u * u * u))); }
float gelu_derivative(float u) {
    const float t = detail::tanh(gelu_k * (u + gelu_c * u * u * u));
    return 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * gelu_k * (1.0f + 3.0f * gelu_c * u * u);
}

/// GELU forward and backward loops at the vector width of the instruction-set level; every width gives
/// the same bits (no FMA contraction in this file: autodiff/sources.cmake).
Tensor gelu_forward(const Tensor& x) {
    return detail::vectorized([&] { return map(x, [](float u) { return gelu_value(u); }); });
}
Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
    return detail::vectorized(
        [&] { return zip(dy, x, x.dtype(), [](float g, float u) { return g * gelu_derivative(u); }); });
}

} // namespace

Tensor add(const Tensor& a, const Tensor& b) {
    Tensor y = kernels::add(a, b);
    if (should_record({&a, &b}))
        record(y, {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& dy) {
            return Gradients{unbroadcast(dy, sa), unbroadcast(dy, sb)};
        });
    return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
    Tensor y = kernels::sub(a, b);
    if (should_record({&a, &b}))
        record(y, {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& dy) {
            return Gradients{unbroadcast(dy, sa), unbroadcast(kernels::neg(dy), sb)};
        });
    return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
    Tensor y = kernels::mul(a, b);
    if (should_record({&a, &b}))
        record(y, {&a, &b}, [a, b](const Tensor& dy) {
            return Gradients{unbroadcast(kernels::mul(dy, b), a.shape()), unbroadcast(kernels::mul(dy, a), b.shape())};
        });
    return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
    Tensor y = kernels::div(a, b);
    if (should_record({&a, &b}))
        record(y, {&a, &b}, [a, b, y](const Tensor& dy) {
            const Tensor da = kernels::div(dy, b);               // dy / b
            const Tensor db = kernels::neg(kernels::mul(da, y)); // -dy a / b² = -(dy / b)(a / b)
            return Gradients{unbroadcast(da, a.shape()), unbroadcast(db, b.shape())};
        });
    return y;
}

Tensor neg(const Tensor& x) {
    return unary_op(x, kernels::neg(x), [](float, float) { return -1.0f; });
}
Tensor scale(const Tensor& x, float c) {
    return unary_op(x, kernels::scale(x, c), [c](float, float) { return c; });
}
Tensor exp(const Tensor& x) {
    return unary_op(x, kernels::exp(x), [](float, float y) { return y; });
}
Tensor log(const Tensor& x) {
    return unary_op(x, kernels::log(x), [](float u, float) { return 1.0f / u; });
}
Tensor sqrt(const Tensor& x) {
    return unary_op(x, kernels::sqrt(x), [](float, float y) { return 0.5f / y; });
}
Tensor square(const Tensor& x) {
    return unary_op(x, kernels::square(x), [](float u, float) { return 2.0f * u; });
}
Tensor pow(const Tensor& x, float p) {
    return unary_op(x, map(x, [p](float u) { return std::pow(u, p); }),
                    [p](float u, float) { return p * std::pow(u, p - 1.0f); });
}
Tensor abs(const Tensor& x) {
    return unary_op(x, kernels::abs(x), [](float u, float) { return u > 0 ? 1.0f : u < 0 ? -1.0f : 0.0f; });
}
Tensor relu(const Tensor& x) {
    return unary_op(x, kernels::relu(x), [](float u, float) { return u > 0 ? 1.0f : 0.0f; });
}
Tensor leaky_relu(const Tensor& x, float slope) {
    return unary_op(x, map(x, [slope](float u) { return u > 0 ? u : slope * u; }),
                    [slope](float u, float) { return u > 0 ? 1.0f : slope; });
}
Tensor tanh(const Tensor& x) {
    return unary_op(x, kernels::tanh(x), [](float, float y) { return 1.0f - y * y; });
}
Tensor sigmoid(const Tensor& x) {
    return unary_op(x, kernels::sigmoid(x), [](float, float y) { return y * (1.0f - y); });
}

Tensor gelu(const Tensor& x) {
    Tensor y = gelu_forward(x);
    if (should_record({&x})) record(y, {&x}, [x](const Tensor& dy) { return Gradients{gelu_backward(dy, x)}; });
    return y;
}

Tensor cast(const Tensor& x, Dtype dtype) {
    Tensor y = x.to(dtype);
    if (dtype == x.dtype()) y = stop_gradient(y); // a new tensor, so the op has its own identity
    if (should_record({&x})) record(y, {&x}, [from = x.dtype()](const Tensor& dy) { return Gradients{dy.to(from)}; });
    return y;
}

Tensor scale_gradient(const Tensor& x, float factor) {
    Tensor y = stop_gradient(x);
    if (should_record({&x}))
        record(y, {&x}, [factor](const Tensor& dy) { return Gradients{kernels::scale(dy, factor)}; });
    return y;
}

} // namespace mixprec::autodiff
