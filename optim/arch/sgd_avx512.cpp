// SGD's update with AVX-512 (compiled with -mavx512f, -mavx512bw, -mavx512vl, -mavx512dq): 16 lanes at a
// time in float, the lanes near underflow in double with the same bits (optim/detail/near_underflow_avx512.hpp).
// The expressions follow sgd_loop in optim/sgd.cpp operation by operation.

#include <mixprec/optim/detail/near_underflow_avx512.hpp>
#include <mixprec/optim/detail/sgd_step.hpp>

namespace mixprec::optim::detail {
namespace {

/// Slot: s0 = the momentum buffer (with momentum).
template <bool momentum>
struct SgdRule {
    static constexpr int slots = momentum ? 1 : 0;
    SgdCoefficients k;

    /// g' = g + wd·w; b = g' on the first step, else μ·b + g'; w − lr·(nesterov ? g' + μ·b : b), or
    /// without momentum w − lr·g'.
    Lanes16 in_float(const Lanes16& x) const {
        const __m512 lr = _mm512_set1_ps(k.lr), mu = _mm512_set1_ps(k.mu), wd = _mm512_set1_ps(k.wd);
        const __m512 g = _mm512_add_ps(x.g, _mm512_mul_ps(wd, x.w));
        if (!momentum) return {_mm512_sub_ps(x.w, _mm512_mul_ps(lr, g)), x.s0, x.s1, x.s2, x.g};
        const __m512 b = k.first ? g : _mm512_add_ps(_mm512_mul_ps(mu, x.s0), g);
        const __m512 step = k.nesterov ? _mm512_add_ps(g, _mm512_mul_ps(mu, b)) : b;
        return {_mm512_sub_ps(x.w, _mm512_mul_ps(lr, step)), b, x.s1, x.s2, x.g};
    }

    /// The same in double, each operation's result rounded to float.
    Lanes8 in_double(const Lanes8& x) const {
        const __m512d lr = _mm512_set1_pd(k.lr), mu = _mm512_set1_pd(k.mu), wd = _mm512_set1_pd(k.wd);
        const __m512d w = _mm512_cvtps_pd(x.w);
        const __m512d g = to_float(_mm512_add_pd(_mm512_cvtps_pd(x.g), to_float(_mm512_mul_pd(wd, w))));
        if (!momentum)
            return {_mm512_cvtpd_ps(_mm512_sub_pd(w, to_float(_mm512_mul_pd(lr, g)))), x.s0, x.s1, x.s2, x.g};
        const __m512d b = k.first ? g : to_float(_mm512_add_pd(to_float(_mm512_mul_pd(mu, _mm512_cvtps_pd(x.s0))), g));
        const __m512d step = k.nesterov ? to_float(_mm512_add_pd(g, to_float(_mm512_mul_pd(mu, b)))) : b;
        return {_mm512_cvtpd_ps(_mm512_sub_pd(w, to_float(_mm512_mul_pd(lr, step)))), _mm512_cvtpd_ps(b), x.s1, x.s2,
                x.g};
    }

    /// Lanes whose float arithmetic may meet a subnormal: weight, buffer or gradient below 2^-100 (a
    /// product with lr, μ or wd may be subnormal). Zeros are fast and excluded.
    __mmask16 near_underflow(const Lanes16& x) const {
        __mmask16 r = below(x.w, -100) | below(x.g, -100);
        if (momentum) r |= below(x.s0, -100);
        return r;
    }
};

} // namespace

void sgd_avx512(std::size_t n, float* w, float* b, const float* g, const SgdCoefficients& k) {
    const Arrays a{w, {b, nullptr, nullptr}, g};
    if (b)
        in_blocks(n, a, SgdRule<true>{k});
    else
        in_blocks(n, a, SgdRule<false>{k});
}

} // namespace mixprec::optim::detail
