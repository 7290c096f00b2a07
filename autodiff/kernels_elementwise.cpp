#include "kernels_elementwise.hpp"

#include "kernels_map.hpp"
#include "tensor_xt.hpp"


#include <array>
#include <cmath>

namespace mixprec::autodiff::kernels {
namespace {

/// out[i] = f(x[i]), chunk by chunk: widen, compute in float32, round once.
template <class F>
Tensor unary(const Tensor& x, F f) {
    return detail::map(x, f);
}

template <class F>
Tensor binary(const Tensor& a, const Tensor& b, F f, const char* name) {
    check_same_dtype(a, b, name);
    if (a.shape() != b.shape()) { // broadcast through xtensor, in float32
        broadcast_shapes(a.shape(), b.shape()); // our message, not xtensor's, for incompatible shapes
        const xt::xarray<float> result = xt::make_lambda_xfunction(
            [f](float u, float v) { return f(u, v); }, to_xarray(a), to_xarray(b));
        return from_xarray(result, a.dtype());
    }
    return detail::zip(a, b, a.dtype(), f);
}

float nan_max(float u, float v) { return std::isnan(u) || std::isnan(v) ? u + v : std::max(u, v); }
float nan_min(float u, float v) { return std::isnan(u) || std::isnan(v) ? u + v : std::min(u, v); }

} // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, std::plus<float>{}, "add"); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(a, b, std::minus<float>{}, "sub"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, std::multiplies<float>{}, "mul"); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(a, b, std::divides<float>{}, "div"); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(a, b, nan_max, "maximum"); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(a, b, nan_min, "minimum"); }

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
    if (x.shape() == shape) return x;
    if (shape.rank() > x.rank() || broadcast_shapes(x.shape(), shape) != x.shape())
        throw shape_error("sum_to_shape: " + x.shape().to_string() + " does not broadcast from " + shape.to_string());
    // Walk x in row-major order, keeping the offset of the output element it adds into; axes that
    // `shape` broadcasts along have output stride 0.
    const std::size_t rank = x.rank(), lead = rank - shape.rank();
    std::vector<std::size_t> stride(rank, 0), index(rank, 0);
    for (std::size_t i = rank, s = 1; i-- > lead;) {
        const std::size_t d = shape[i - lead];
        stride[i] = d == 1 ? 0 : s;
        s *= d;
    }
    const std::vector<float> v = x.to_floats();
    std::vector<float> sum(shape.elements(), 0.0f);
    std::size_t out = 0;
    for (float value : v) {
        sum[out] += value;
        for (std::size_t a = rank; a-- > 0;) { // next index, last axis fastest
            out += stride[a];
            if (++index[a] < x.shape()[a]) break;
            out -= stride[a] * index[a];
            index[a] = 0;
        }
    }
    return Tensor::from_floats(shape, sum, x.dtype());
}

Tensor scale(const Tensor& x, float factor) {
    return unary(x, [factor](float v) { return v * factor; });
}
Tensor neg(const Tensor& x) { return unary(x, [](float v) { return -v; }); }
Tensor abs(const Tensor& x) { return unary(x, [](float v) { return std::fabs(v); }); }
Tensor exp(const Tensor& x) { return unary(x, [](float v) { return std::exp(v); }); }
Tensor log(const Tensor& x) { return unary(x, [](float v) { return std::log(v); }); }
Tensor sqrt(const Tensor& x) { return unary(x, [](float v) { return std::sqrt(v); }); }
Tensor square(const Tensor& x) { return unary(x, [](float v) { return v * v; }); }
Tensor relu(const Tensor& x) { return unary(x, [](float v) { return v > 0.0f || std::isnan(v) ? v : 0.0f; }); }
Tensor tanh(const Tensor& x) { return unary(x, [](float v) { return std::tanh(v); }); }
Tensor sigmoid(const Tensor& x) {
    return unary(x, [](float v) {
        if (v >= 0.0f) return 1.0f / (1.0f + std::exp(-v));
        const float e = std::exp(v);
        return e / (1.0f + e);
    });
}

} // namespace mixprec::autodiff::kernels
