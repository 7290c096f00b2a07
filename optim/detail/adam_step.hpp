#pragma once
// Internal: one Adam step over a run of elements, shared by optim/adam.cpp and its AVX-512 kernel
// (optim/arch/adam_avx512.cpp). Include only from .cpp files.

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

/// The update of optim/adam.cpp's adam_loop over [0, n) with AVX-512, with the same bits. Lanes whose
/// state is below 2^-100 in magnitude (subnormal, or close enough that a product may be) or whose gradient
/// is below 2^-60 (so that g² may be) run in double, each operation rounded once to float
/// (optim/detail/near_underflow_avx512.hpp): the m and v of a weight whose gradient stays exactly zero (a
/// pixel that is 0 in every image, a dead unit) decay to a few multiples of 2^-149 and stay there. v_max
/// is null without AMSGrad. The caller checks the instruction-set level.
#if defined(MIXPREC_X86_KERNELS)
void adam_avx512(std::size_t n, float* w, float* m, float* v, float* v_max, const float* g, const AdamCoefficients& k);
#else // never called: in_pieces runs the portable loop
inline void adam_avx512(std::size_t, float*, float*, float*, float*, const float*, const AdamCoefficients&) {}
#endif

} // namespace mixprec::optim::detail
