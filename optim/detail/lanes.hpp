#pragma once
// Internal: an optimizer's update rule written once, for one float and for the vectors of its kernels.
// Include only from .cpp files.
//
// A rule (AdamRule, SgdRule) is a struct with `static constexpr int slots` (0 to 3), a call operator
// template that updates Lanes<V> in place with +, −, ×, ÷, sqrt and larger, and near_underflow(Lanes<V>),
// the lanes the kernels take through double. V is float in the portable loop below; in the kernels
// (optim/detail/near_underflow_avx2.hpp, near_underflow_avx512.hpp) a vector of floats, or a vector of
// doubles that rounds every result to float. Every one rounds each operation once to float, so all give
// the same bits.
//
// Why double: an optimizer's state decays toward zero for a weight whose gradient stays exactly zero (a
// pixel that is 0 in every image, a dead unit) until the decrement rounds to zero, and then sits at a few
// multiples of 2^-149 for good. Float arithmetic on subnormal numbers takes a microcode assist per
// instruction on many Intel cores (about 100 times a normal multiply on the Xeon of bench/README.md). For
// +, −, ×, ÷ and √ of floats the double result rounded once to float is the correctly rounded float result
// (53 ≥ 2·24 + 2 bits; the subnormal grid is coarser still), so lanes computed in double, each result
// rounded to float before the next operation uses it, keep the bits of float arithmetic, while converting
// subnormal floats to double and back takes no slow path. (The vectors are written with intrinsics: GCC
// narrows float(double(a) op double(b)) back to a float operation, as the same theorem allows it to.)

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace mixprec::optim::detail {

/// The values of one update at some lanes: the weights, up to three slots, the gradient.
template <class V>
struct Lanes {
    V w, s0, s1, s2, g;
};

/// The arrays of one update: the weights and Rule::slots slot arrays are read and written, g read.
struct Arrays {
    float* w;
    float* s[3];
    const float* g;
};

using std::sqrt;

/// std::max(a, b): a unless a < b (so a when either is NaN). The vectors have their own.
[[gnu::always_inline]] inline float larger(float a, float b) { return std::max(a, b); }

/// rule over [0, n), one float at a time, for the compiler to vectorize at the width of the level in use
/// (optim/detail/in_pieces.hpp).
template <class Rule>
[[gnu::always_inline]] inline void lane_by_lane(std::size_t n, const Arrays& a, const Rule& rule) {
    float* __restrict w = a.w;
    float* __restrict s0 = a.s[0];
    float* __restrict s1 = a.s[1];
    float* __restrict s2 = a.s[2];
    const float* __restrict g = a.g;
    for (std::size_t i = 0; i < n; ++i) {
        Lanes<float> x{w[i], 0.0f, 0.0f, 0.0f, g[i]};
        if constexpr (Rule::slots > 0) x.s0 = s0[i];
        if constexpr (Rule::slots > 1) x.s1 = s1[i];
        if constexpr (Rule::slots > 2) x.s2 = s2[i];
        rule(x);
        w[i] = x.w;
        if constexpr (Rule::slots > 0) s0[i] = x.s0;
        if constexpr (Rule::slots > 1) s1[i] = x.s1;
        if constexpr (Rule::slots > 2) s2[i] = x.s2;
    }
}

/// The arrays of a from element lo on.
[[gnu::always_inline]] inline Arrays part_of(const Arrays& a, std::size_t lo) {
    Arrays part{a.w + lo, {}, a.g + lo};
    for (int k = 0; k < 3; ++k) part.s[k] = a.s[k] ? a.s[k] + lo : nullptr;
    return part;
}

} // namespace mixprec::optim::detail
