#pragma once
// Internal: softmax along one lane of float32 values (len elements `step` apart) and its backward, as
// softmax, log_softmax and the fused attention compute them. The exponentials and the division are
// elementwise, so a contiguous lane's loops vectorize in a copy of isa_kernels.hpp; every sum runs in lane
// order. exp is mixprec's vectorizable one (vector_math.hpp, within 1 ulp). Include only from .cpp files
// compiled as vector_math.hpp asks.

#include <mixprec/autodiff/tensor/detail/vector_math.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace mixprec::autodiff::detail {

/// p = softmax(x) along the lane, and logp = log softmax(x) when logp is not null. p may be x when logp
/// is null.
inline void softmax_lane(const float* x, float* p, float* logp, std::size_t len, std::size_t step) {
    float m = -std::numeric_limits<float>::infinity();
    for (std::size_t k = 0; k < len; ++k) m = std::max(m, x[k * step]);
    if (step == 1) {
        for (std::size_t k = 0; k < len; ++k) p[k] = detail::exp(x[k] - m);
    } else {
        for (std::size_t k = 0; k < len; ++k) p[k * step] = detail::exp(x[k * step] - m);
    }
    float s = 0.0f;
    for (std::size_t k = 0; k < len; ++k) s += p[k * step];
    if (logp != nullptr) {
        const float log_s = std::log(s);
        for (std::size_t k = 0; k < len; ++k) logp[k * step] = (x[k * step] - m) - log_s;
    }
    if (step == 1) {
        for (std::size_t k = 0; k < len; ++k) p[k] /= s;
    } else {
        for (std::size_t k = 0; k < len; ++k) p[k * step] /= s;
    }
}

/// dx = p ⊙ (dy − Σ dy ⊙ p) along the lane (p = softmax(x)). dx may be dy.
inline void softmax_backward_lane(const float* p, const float* dy, float* dx, std::size_t len, std::size_t step) {
    float dot = 0.0f;
    for (std::size_t k = 0; k < len; ++k) dot += dy[k * step] * p[k * step];
    for (std::size_t k = 0; k < len; ++k) dx[k * step] = p[k * step] * (dy[k * step] - dot);
}

} // namespace mixprec::autodiff::detail
