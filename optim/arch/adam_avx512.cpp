// Adam's update with AVX-512 (compiled with -mavx512f, -mavx512bw, -mavx512vl, -mavx512dq): 16 lanes at a
// time in float, the lanes near underflow in double with the same bits (optim/detail/near_underflow_avx512.hpp).
// The expressions follow adam_loop in optim/adam.cpp operation by operation.

#include <mixprec/optim/detail/adam_step.hpp>
#include <mixprec/optim/detail/near_underflow_avx512.hpp>

namespace mixprec::optim::detail {
namespace {

/// Slots: s0 = m, s1 = v, s2 = v_max (AMSGrad).
template <bool amsgrad>
struct AdamRule {
    static constexpr int slots = amsgrad ? 3 : 2;
    AdamCoefficients k;

    /// In float, rounding as adam_loop does. max(v, v_max) keeps v_max unless v is greater, as
    /// std::max(v_max, v) does.
    Lanes16 in_float(const Lanes16& x) const {
        const __m512 c1 = _mm512_set1_ps(k.c1), b2 = _mm512_set1_ps(k.b2), c2 = _mm512_set1_ps(k.c2),
                     eps = _mm512_set1_ps(k.eps), step_size = _mm512_set1_ps(k.step_size),
                     bc2_sqrt = _mm512_set1_ps(k.bc2_sqrt), decay = _mm512_set1_ps(k.decay);
        const __m512 m = _mm512_add_ps(x.s0, _mm512_mul_ps(c1, _mm512_sub_ps(x.g, x.s0)));
        const __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, x.s1), _mm512_mul_ps(_mm512_mul_ps(c2, x.g), x.g));
        const __m512 v_max = amsgrad ? _mm512_max_ps(v, x.s2) : v;
        const __m512 denominator = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v_max), bc2_sqrt), eps);
        const __m512 w =
            _mm512_sub_ps(_mm512_mul_ps(x.w, decay), _mm512_div_ps(_mm512_mul_ps(step_size, m), denominator));
        return {w, m, v, v_max, x.g};
    }

    /// The same in double, each operation's result rounded to float.
    Lanes8 in_double(const Lanes8& x) const {
        const __m512d c1 = _mm512_set1_pd(k.c1), b2 = _mm512_set1_pd(k.b2), c2 = _mm512_set1_pd(k.c2),
                      eps = _mm512_set1_pd(k.eps), step_size = _mm512_set1_pd(k.step_size),
                      bc2_sqrt = _mm512_set1_pd(k.bc2_sqrt), decay = _mm512_set1_pd(k.decay);
        const __m512d w0 = _mm512_cvtps_pd(x.w), m0 = _mm512_cvtps_pd(x.s0), v0 = _mm512_cvtps_pd(x.s1),
                      g = _mm512_cvtps_pd(x.g);
        const __m512d m = to_float(_mm512_add_pd(m0, to_float(_mm512_mul_pd(c1, to_float(_mm512_sub_pd(g, m0))))));
        const __m512d v = to_float(
            _mm512_add_pd(to_float(_mm512_mul_pd(b2, v0)), to_float(_mm512_mul_pd(to_float(_mm512_mul_pd(c2, g)), g))));
        const __m512d v_max = amsgrad ? _mm512_max_pd(v, _mm512_cvtps_pd(x.s2)) : v;
        const __m512d denominator =
            to_float(_mm512_add_pd(to_float(_mm512_div_pd(to_float(_mm512_sqrt_pd(v_max)), bc2_sqrt)), eps));
        const __m512d w = _mm512_sub_pd(to_float(_mm512_mul_pd(w0, decay)),
                                        to_float(_mm512_div_pd(to_float(_mm512_mul_pd(step_size, m)), denominator)));
        return {_mm512_cvtpd_ps(w), _mm512_cvtpd_ps(m), _mm512_cvtpd_ps(v), _mm512_cvtpd_ps(v_max), x.g};
    }

    /// Lanes whose float arithmetic may meet a subnormal: any state value below 2^-100 (subnormal, or a
    /// moment whose product with the step size may be; decaying state crosses this band in a few hundred
    /// steps and then sticks), or a gradient below 2^-60 (its square may be). Zeros are fast and excluded.
    __mmask16 near_underflow(const Lanes16& x) const {
        __mmask16 r = below(x.w, -100) | below(x.s0, -100) | below(x.s1, -100) | below(x.g, -60);
        if (amsgrad) r |= below(x.s2, -100);
        return r;
    }
};

} // namespace

void adam_avx512(std::size_t n, float* w, float* m, float* v, float* v_max, const float* g, const AdamCoefficients& k) {
    const Arrays a{w, {m, v, v_max}, g};
    if (v_max)
        in_blocks(n, a, AdamRule<true>{k});
    else
        in_blocks(n, a, AdamRule<false>{k});
}

} // namespace mixprec::optim::detail
