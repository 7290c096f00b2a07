#pragma once
// Internal: Adam's rule, shared by optim/adam.cpp and its kernels (optim/arch/adam_*.cpp). Include only
// from .cpp files.

#include <mixprec/optim/detail/lanes.hpp>

#include <cstddef>

namespace mixprec::optim::detail {

/// The float32 coefficients of one step, each rounded once from double (optim/adam.cpp).
struct AdamCoefficients {
    float c1;        ///< 1 − β₁
    float b2;        ///< β₂
    float c2;        ///< 1 − β₂
    float eps;       ///< ε
    float step_size; ///< lr / (1 − β₁ᵗ)
    float bc2_sqrt;  ///< √(1 − β₂ᵗ)
    float decay;     ///< 1 − lr·wd (exactly 1 for Adam)
};

/// m ← m + (1−β₁)(g − m), v ← β₂v + (1−β₂)g², (AMSGrad) v_max ← max(v_max, v), then
/// w ← w·decay − step_size · m / (√v̂ / bc2_sqrt + ε) with v̂ = v, or v_max. Slots: s0 = m, s1 = v,
/// s2 = v_max. A rule of optim/detail/lanes.hpp.
template <bool amsgrad>
struct AdamRule {
    static constexpr int slots = amsgrad ? 3 : 2;
    AdamCoefficients k;

    template <class V>
    [[gnu::always_inline]] void operator()(Lanes<V>& x) const {
        x.s0 = x.s0 + V(k.c1) * (x.g - x.s0);
        x.s1 = V(k.b2) * x.s1 + V(k.c2) * x.g * x.g;
        if constexpr (amsgrad) x.s2 = larger(x.s2, x.s1);
        const V& v_hat = amsgrad ? x.s2 : x.s1;
        x.w = x.w * V(k.decay) - V(k.step_size) * x.s0 / (sqrt(v_hat) / V(k.bc2_sqrt) + V(k.eps));
    }

    /// Lanes whose float arithmetic may meet a subnormal: any state value below 2^-100 (subnormal, or a
    /// moment whose product with the step size may be; decaying state crosses this band in a few hundred
    /// steps and then sticks), or a gradient below 2^-60 (its square may be). Zeros are fast and excluded.
    template <class V>
    auto near_underflow(const Lanes<V>& x) const {
        if constexpr (amsgrad) return below(-100, x.w, x.s0, x.s1, x.s2) | below(-60, x.g);
        return below(-100, x.w, x.s0, x.s1) | below(-60, x.g);
    }
};

/// AdamRule over [0, n) of a, with the bits of the portable loop (lane_by_lane), where a.s[2] (v_max) is
/// null without AMSGrad. With `in_double` lanes near underflow run in double, each operation rounded once to float
/// (optim/detail/lanes.hpp): the m and v of a weight whose gradient stays exactly zero (a
/// pixel that is 0 in every image, a dead unit) decay to a few multiples of 2^-149 and stay there. The
/// caller checks the instruction-set level: AVX-512 F/BW/VL/DQ, or AVX2.
#if defined(MIXPREC_X86_KERNELS)
void adam_avx512(std::size_t n, const Arrays& a, const AdamCoefficients& k, bool in_double);
void adam_avx2(std::size_t n, const Arrays& a, const AdamCoefficients& k, bool in_double);
#else // never called: in_pieces runs the portable loop
inline void adam_avx512(std::size_t, const Arrays&, const AdamCoefficients&, bool) {}
inline void adam_avx2(std::size_t, const Arrays&, const AdamCoefficients&, bool) {}
#endif

} // namespace mixprec::optim::detail
