#pragma once
// Internal: one SGD step over a run of elements, shared by optim/sgd.cpp and its AVX-512 kernel
// (optim/arch/sgd_avx512.cpp). Include only from .cpp files.

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

/// The update of optim/sgd.cpp's sgd_loop over [0, n) with AVX-512, with the same bits; b is the momentum
/// buffer (null without momentum). Lanes whose weight, buffer or gradient is below 2^-100 in magnitude
/// run in double, each operation rounded once to float (optim/detail/near_underflow_avx512.hpp): the
/// buffer of a weight whose gradient stays zero decays to a few multiples of 2^-149 and stays there.
/// The caller checks the instruction-set level.
#if defined(MIXPREC_X86_KERNELS)
void sgd_avx512(std::size_t n, float* w, float* b, const float* g, const SgdCoefficients& k);
#else // never called: in_pieces runs the portable loop
inline void sgd_avx512(std::size_t, float*, float*, const float*, const SgdCoefficients&) {}
#endif

} // namespace mixprec::optim::detail
