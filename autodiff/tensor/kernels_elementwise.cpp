#include <mixprec/autodiff/tensor/kernels_elementwise.hpp>

#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>
#include <mixprec/autodiff/tensor/detail/vector_math.hpp>

#include <array>
#include <cmath>

namespace mixprec::autodiff::kernels {
namespace {

template <class F>
Tensor binary(const Tensor& a, const Tensor& b, F f, const char* name) {
    check_same_dtype(a, b, name);
    if (a.shape() != b.shape()) return detail::broadcast_zip(a, b, a.dtype(), f);
    return detail::zip(a, b, a.dtype(), f);
}

float nan_max(float u, float v) { return std::isnan(u) || std::isnan(v) ? u + v : std::max(u, v); }
float nan_min(float u, float v) { return std::isnan(u) || std::isnan(v) ? u + v : std::min(u, v); }

/// tanh and sigmoid through the branch-free functions of vector_math.hpp, at the vector width of the
/// instruction-set level; every width gives the same bits (no FMA contraction in this file:
/// autodiff/sources.cmake).
Tensor map_tanh(const Tensor& x) {
    return autodiff::detail::vectorized(
        [&] { return detail::map(x, [](float v) { return autodiff::detail::tanh(v); }); });
}
Tensor map_sigmoid(const Tensor& x) {
    return autodiff::detail::vectorized(
        [&] { return detail::map(x, [](float v) { return autodiff::detail::sigmoid(v); }); });
}

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
    // Each row of x adds into the output element(s) its broadcast offset points at, in float32. A narrow
    // row is widened into a buffer of one row first, so x is never widened whole.
    const auto stride = detail::broadcast_strides(shape, x.shape());
    std::vector<float> sum(shape.elements(), 0.0f);
    const std::size_t n = x.shape()[x.rank() - 1];
    if (shape == Shape{n} && n != 0) { // one sum per column (a bias's gradient): the columns over the threads
        const std::size_t rows = x.size() / n;
        autodiff::detail::split(n, 16, [&](std::size_t j0, std::size_t j1) {
            std::vector<float> wide(x.dtype() == Dtype::float32 ? 0 : j1 - j0);
            autodiff::detail::vectorized([&] {
                for (std::size_t r = 0; r < rows; ++r) {
                    const float* row = detail::floats_at(x, r * n + j0, j1 - j0, wide);
                    for (std::size_t j = j0; j < j1; ++j) sum[j] += row[j - j0];
                }
            });
        });
        return Tensor::from_floats(shape, sum, x.dtype());
    }
    const bool inner = stride.back() == 1;
    std::vector<float> wide(x.dtype() == Dtype::float32 ? 0 : n);
    detail::for_each_row(x.shape(), stride, stride, [&](std::size_t out, std::size_t, std::size_t r) {
        const float* row = detail::floats_at(x, r * n, n, wide);
        float* dst = sum.data() + out;
        if (inner) {
            for (std::size_t j = 0; j < n; ++j) dst[j] += row[j];
        } else {
            float s = 0.0f;
            for (std::size_t j = 0; j < n; ++j) s += row[j];
            dst[0] += s;
        }
    });
    return Tensor::from_floats(shape, sum, x.dtype());
}

Tensor scale(const Tensor& x, float factor) {
    return detail::map(x, [factor](float v) { return v * factor; });
}
Tensor neg(const Tensor& x) {
    return detail::map(x, [](float v) { return -v; });
}
Tensor abs(const Tensor& x) {
    return detail::map(x, [](float v) { return std::fabs(v); });
}
Tensor exp(const Tensor& x) {
    return detail::map(x, [](float v) { return std::exp(v); });
}
Tensor log(const Tensor& x) {
    return detail::map(x, [](float v) { return std::log(v); });
}
Tensor sqrt(const Tensor& x) {
    return detail::map(x, [](float v) { return std::sqrt(v); });
}
Tensor square(const Tensor& x) {
    return detail::map(x, [](float v) { return v * v; });
}
Tensor relu(const Tensor& x) {
    return detail::map(x, [](float v) { return v > 0.0f || std::isnan(v) ? v : 0.0f; });
}
Tensor tanh(const Tensor& x) { return map_tanh(x); }
Tensor sigmoid(const Tensor& x) { return map_sigmoid(x); }

} // namespace mixprec::autodiff::kernels
