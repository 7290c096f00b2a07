#include "kernels_elementwise.hpp"

#include "convert.hpp"
#include "tensor_xt.hpp"

#include <array>
#include <cmath>

namespace mixprec::autodiff::kernels {
namespace {

constexpr std::size_t block = 2048; // floats per chunk: a few KiB, stays in L1

const std::byte* bytes(const Tensor& t, std::size_t element) {
    return static_cast<const std::byte*>(t.raw()) + element * size_of(t.dtype());
}
std::byte* bytes(Tensor& t, std::size_t element) { return static_cast<std::byte*>(t.raw()) + element * size_of(t.dtype()); }

/// out[i] = f(x[i]), chunk by chunk: widen, compute in float32, round once.
template <class F>
Tensor unary(const Tensor& x, F f) {
    Tensor out(x.shape(), x.dtype());
    std::array<float, block> buf;
    for (std::size_t i = 0; i < x.size(); i += block) {
        const std::size_t n = std::min(block, x.size() - i);
        widen(bytes(x, i), x.dtype(), buf.data(), n);
        for (std::size_t j = 0; j < n; ++j) buf[j] = f(buf[j]);
        narrow(buf.data(), bytes(out, i), n, out.dtype());
    }
    return out;
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
    Tensor out(a.shape(), a.dtype());
    std::array<float, block> u, v;
    for (std::size_t i = 0; i < a.size(); i += block) {
        const std::size_t n = std::min(block, a.size() - i);
        widen(bytes(a, i), a.dtype(), u.data(), n);
        widen(bytes(b, i), b.dtype(), v.data(), n);
        for (std::size_t j = 0; j < n; ++j) u[j] = f(u[j], v[j]);
        narrow(u.data(), bytes(out, i), n, out.dtype());
    }
    return out;
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
