#pragma once
// Internal: chunked elementwise loops behind the kernels and op backwards. Each chunk is widened to
// float32, computed, and rounded once to the output dtype. Include only from .cpp files.

#include "convert.hpp"
#include "tensor.hpp"

#include <algorithm>
#include <array>

namespace mixprec::autodiff::kernels::detail {

inline constexpr std::size_t chunk = 2048; // floats: a few KiB per operand, stays in L1

inline const std::byte* bytes_at(const Tensor& t, std::size_t element) {
    return static_cast<const std::byte*>(t.raw()) + element * size_of(t.dtype());
}
inline std::byte* bytes_at(Tensor& t, std::size_t element) {
    return static_cast<std::byte*>(t.raw()) + element * size_of(t.dtype());
}

/// out[i] = f(x[i]) in x's dtype.
template <class F>
Tensor map(const Tensor& x, F f) {
    Tensor out(x.shape(), x.dtype());
    std::array<float, chunk> u;
    for (std::size_t i = 0; i < x.size(); i += chunk) {
        const std::size_t n = std::min(chunk, x.size() - i);
        widen(bytes_at(x, i), x.dtype(), u.data(), n);
        for (std::size_t j = 0; j < n; ++j) u[j] = f(u[j]);
        narrow(u.data(), bytes_at(out, i), n, out.dtype());
    }
    return out;
}

/// out[i] = f(a[i], b[i]) for same-shape tensors, in `dtype`.
template <class F>
Tensor zip(const Tensor& a, const Tensor& b, Dtype dtype, F f) {
    check_same_shape(a, b, "elementwise");
    Tensor out(a.shape(), dtype);
    std::array<float, chunk> u, v;
    for (std::size_t i = 0; i < a.size(); i += chunk) {
        const std::size_t n = std::min(chunk, a.size() - i);
        widen(bytes_at(a, i), a.dtype(), u.data(), n);
        widen(bytes_at(b, i), b.dtype(), v.data(), n);
        for (std::size_t j = 0; j < n; ++j) u[j] = f(u[j], v[j]);
        narrow(u.data(), bytes_at(out, i), n, dtype);
    }
    return out;
}

/// out[i] = f(a[i], b[i], c[i]) for same-shape tensors, in `dtype`.
template <class F>
Tensor zip3(const Tensor& a, const Tensor& b, const Tensor& c, Dtype dtype, F f) {
    check_same_shape(a, b, "elementwise");
    check_same_shape(a, c, "elementwise");
    Tensor out(a.shape(), dtype);
    std::array<float, chunk> u, v, w;
    for (std::size_t i = 0; i < a.size(); i += chunk) {
        const std::size_t n = std::min(chunk, a.size() - i);
        widen(bytes_at(a, i), a.dtype(), u.data(), n);
        widen(bytes_at(b, i), b.dtype(), v.data(), n);
        widen(bytes_at(c, i), c.dtype(), w.data(), n);
        for (std::size_t j = 0; j < n; ++j) u[j] = f(u[j], v[j], w[j]);
        narrow(u.data(), bytes_at(out, i), n, dtype);
    }
    return out;
}

} // namespace mixprec::autodiff::kernels::detail
