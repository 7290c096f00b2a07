#pragma once
// Internal: SGD's rule, shared by optim/sgd.cpp and its kernels (optim/arch/sgd_*.cpp). Include only from
// .cpp files.

#include <mixprec/optim/detail/lanes.hpp>

#include <cstddef>

namespace mixprec::optim::detail {

/// The settings of one step (optim/sgd.hpp has the rule).
struct SgdCoefficients {
    float lr;      ///< the learning rate of this step
    float mu;      ///< momentum μ (> 0 where a buffer is given)
    float wd;      ///< L2 weight decay, added to the gradient
    bool first;    ///< the first step: the buffer starts as the gradient
    bool nesterov; ///< g + μ·b instead of b
};

/// g' = g + wd·w; b ← g' on the first step, else μ·b + g'; w ← w − lr·(nesterov ? g' + μ·b : b), or
/// without momentum w ← w − lr·g'. Slot: s0 = the momentum buffer b. A rule of optim/detail/lanes.hpp.
template <bool momentum>
struct SgdRule {
    static constexpr int slots = momentum ? 1 : 0;
    SgdCoefficients k;

    template <class V>
    [[gnu::always_inline]] void operator()(Lanes<V>& x) const {
        const V g = x.g + V(k.wd) * x.w;
        if constexpr (momentum) {
            x.s0 = k.first ? g : V(k.mu) * x.s0 + g;
            x.w = x.w - V(k.lr) * (k.nesterov ? g + V(k.mu) * x.s0 : x.s0);
        } else {
            x.w = x.w - V(k.lr) * g;
        }
    }

    /// Lanes whose float arithmetic may meet a subnormal: weight, buffer or gradient below 2^-100 (a
    /// product with lr, μ or wd may be subnormal). Zeros are fast and excluded.
    template <class V>
    auto near_underflow(const Lanes<V>& x) const {
        if constexpr (momentum) return below(-100, x.w, x.g, x.s0);
        return below(-100, x.w, x.g);
    }
};

/// SgdRule over [0, n) of a, with the bits of the portable loop (lane_by_lane); a.s[0] is the momentum
/// buffer, null without momentum. With `in_double` lanes near underflow run in double, each operation rounded once to
/// float (optim/detail/lanes.hpp): the buffer of a weight whose gradient stays zero decays
/// to a few multiples of 2^-149 and stays there. The caller checks the instruction-set level: AVX-512
/// F/BW/VL/DQ, or AVX2.
#if defined(MIXPREC_X86_KERNELS)
void sgd_avx512(std::size_t n, const Arrays& a, const SgdCoefficients& k, bool in_double);
void sgd_avx2(std::size_t n, const Arrays& a, const SgdCoefficients& k, bool in_double);
#else // never called: in_pieces runs the portable loop
inline void sgd_avx512(std::size_t, const Arrays&, const SgdCoefficients&, bool) {}
inline void sgd_avx2(std::size_t, const Arrays&, const SgdCoefficients&, bool) {}
#endif

} // namespace mixprec::optim::detail
