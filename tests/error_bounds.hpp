#pragma once
// Error bounds for tests that compare a computed sum (a matrix product, a convolution, a pooled window)
// with a float64 reference. They follow from the arithmetic, not from one machine's results, so they hold
// whatever order a BLAS library, a thread split or a vector width sums in.
//
// A float32 sum of k terms t_i = a_i·b_i, each product rounded or fused (FMA), added in any order
// (recursive, blocked, pairwise, split over threads), differs from the exact sum by at most
//     γ_k · Σ|t_i|,   γ_k = k·u / (1 − k·u),   u = 2^-24                         (Higham, Accuracy and
// Stability of Numerical Algorithms, 2nd ed., §3.1): every term passes through at most k roundings of
// relative size ≤ u. The oneDNN routes (vdpbf16ps, AMX tiles) flush float32 subnormals to zero; each of
// the k steps then loses at most 2^-126 more. Rounding that sum s once to a narrower format moves it by at
// most half a unit in the last place of s, which is at most half a unit of the result c (round to nearest
// never leaves s's binade downwards). The float64 reference carries its own γ_k with u = 2^-53.

#include <mixprec/mixprec.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace error_bounds {

using mixprec::autodiff::Dtype;

/// γ_k for float32 sums: k·2^-24 / (1 − k·2^-24).
inline double gamma32(std::size_t k) {
    const double ku = double(k) * 0x1p-24;
    return ku / (1 - ku);
}

/// The same for the float64 reference: k·2^-53 / (1 − k·2^-53).
inline double gamma64(std::size_t k) {
    const double ku = double(k) * 0x1p-53;
    return ku / (1 - ku);
}

/// T's unit in the last place at |x| ≥ 0: 2^(e − (digits − 1)), e = max(⌊log2 |x|⌋, the smallest normal
/// exponent), so below the normal range it is the subnormal spacing. From std::numeric_limits<T>, which
/// mixprec defines for its formats.
template <class T>
double ulp_of(double x) {
    using limits = std::numeric_limits<T>;
    const int emin = limits::min_exponent - 1;
    const int e = x == 0 ? emin : std::max(std::ilogb(x), emin);
    return std::ldexp(1.0, e - (limits::digits - 1));
}

/// The same for a runtime dtype.
inline double ulp(Dtype dtype, double x) {
    namespace ad = mixprec::autodiff;
    switch (dtype) {
    case Dtype::float32:
        return ulp_of<float>(x);
    case Dtype::float16:
        return ulp_of<ad::float16>(x);
    case Dtype::bfloat16:
        return ulp_of<ad::bfloat16>(x);
    case Dtype::cbfloat16:
        return ulp_of<ad::cbfloat16>(x);
    case Dtype::float8_e4m3:
        return ulp_of<ad::float8_e4m3>(x);
    case Dtype::float8_e5m2:
        return ulp_of<ad::float8_e5m2>(x);
    }
    return ulp_of<float>(x);
}

/// Bound on |s − σ| for s a float32 sum of k terms with Σ|t_i| = magnitude and σ their exact sum:
/// γ_k·magnitude + k·2^-126 (flushed subnormals).
inline double float32_sum_error(std::size_t k, double magnitude) {
    return gamma32(k) * magnitude + double(k) * 0x1p-126;
}

/// Bound on |c − exact| for c = that float32 sum rounded once to `dtype` (no extra rounding for float32)
/// and `exact` the float64 reference sum of the same terms.
inline double rounded_sum_error(Dtype dtype, std::size_t k, double exact, double magnitude) {
    const double sum = float32_sum_error(k, magnitude) + gamma64(k) * magnitude;
    return sum + (dtype == Dtype::float32 ? 0.0 : 0.5 * ulp(dtype, std::fabs(exact) + sum));
}

/// Bound on |c1 − c2| for two such results of the same terms summed in two orders: both float32 sums lie
/// within float32_sum_error of the exact sum, and each rounding moves by at most half a unit of its result.
inline double two_orders_difference(Dtype dtype, std::size_t k, double magnitude, double c1, double c2) {
    const double rounding =
        dtype == Dtype::float32 ? 0.0 : 0.5 * (ulp(dtype, std::fabs(c1)) + ulp(dtype, std::fabs(c2)));
    return 2 * float32_sum_error(k, magnitude) + rounding;
}

} // namespace error_bounds
