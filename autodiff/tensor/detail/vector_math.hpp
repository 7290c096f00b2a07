#pragma once
// Internal: float32 exp, tanh and sigmoid written without branches or library calls, so that the
// elementwise loops calling them vectorize (glibc's expf/tanhf are scalar calls that stop GCC). Every
// case is computed and the answer picked with selects; NaN propagates, and the infinities give the
// limits. Accuracy, checked against double precision over all 2^32 float32 inputs: exp within 0.78 ulp,
// tanh within 1.02 ulp, sigmoid within 1.17 ulp. A TU that calls them should be compiled
// with -fno-trapping-math (so the selects become blends) and -ffp-contract=off (so that every
// vector width of isa_kernels.hpp rounds alike); see autodiff/sources.cmake. Include only from .cpp files.

#include <bit>
#include <cmath>
#include <cstdint>

namespace mixprec::autodiff::detail {

/// e^x as an unevaluated sum hi + lo: hi is the float32 result (exp below), lo the part of it that
/// rounding hi lost, so that a caller can use e^x to about 3e-9 relative (the polynomial's error).
struct ExpParts {
    float hi, lo;
};

/// e^x for every float32 x, as hi + lo (see ExpParts): 0 for x ≤ −104 and wherever e^x rounds to 0,
/// +inf for x ≥ 89 and wherever it overflows, subnormal results rounded once, NaN for NaN.
///
/// Cody–Waite reduction: x = n ln2 + r with n = round(x log2 e) and |r| ≤ ln2/2, where ln2 is split
/// into a high part with 15 significant bits (so n·ln2_hi is exact for |n| ≤ 256) and the float
/// nearest the rest; e^r = 1 + r + r²P(r) with P of degree 4 fitted (minimax, relative error 3e-9,
/// 0.05 ulp) on [−ln2/2, ln2/2]; then e^x = e^r · 2^⌊n/2⌋ · 2^(n−⌊n/2⌋), two factors so that each is a
/// normal float for every n in [−150, 128] and only the last product rounds (into the subnormals or to
/// infinity).
inline ExpParts exp_parts(float x) {
    constexpr float lowest = -104.0f, highest = 89.0f;
    constexpr float log2e = 1.44269504f;
    constexpr float ln2_hi = 0.693145751953125f; // 0x3f317200
    constexpr float ln2_lo = 1.428606765e-06f;   // ln 2 − ln2_hi, rounded
    constexpr float shifter = 0x1.8p23f;         // y + shifter − shifter = y rounded to an integer, |y| < 2^22
    constexpr float p2 = 4.999999404e-01f, p3 = 1.666652113e-01f, p4 = 4.166838899e-02f, p5 = 8.368717507e-03f,
                    p6 = 1.381458947e-03f;

    x = x < lowest ? lowest : x; // comparisons with NaN are false: NaN passes both clamps
    x = x > highest ? highest : x;
    const float shifted = x * log2e + shifter;
    const float n = shifted - shifter;
    // n as an integer from the low bits of `shifted` (no float-to-int conversion, whose NaN case is
    // undefined); unsigned arithmetic, so a NaN's bits give a meaningless but defined value.
    const std::uint32_t n_bits = std::bit_cast<std::uint32_t>(shifted) - std::bit_cast<std::uint32_t>(shifter);
    const auto ni = static_cast<std::int32_t>(n_bits);
    // r = r_hi − c: r_hi = x − n·ln2_hi is exact (Sterbenz), c = n·ln2_lo ≤ 2.2e-4 is a correction.
    const float r_hi = x - n * ln2_hi;
    const float c = n * ln2_lo;
    const float r = r_hi - c; // rounded: used only inside r²P(r), where its error is ≤ 0.1 ulp
    // e^r = 1 + r_hi − c + r²P(r), with 1 + r_hi as its rounded sum plus the exact rounding error
    // (Fast2Sum, |r_hi| < 1), so that only the final addition rounds at the result's scale.
    const float sum = 1.0f + r_hi;
    const float sum_error = (1.0f - sum) + r_hi;
    const float tail = (sum_error - c) + r * r * (p2 + r * (p3 + r * (p4 + r * (p5 + r * p6))));
    const float p = sum + tail;
    const float p_lo = tail - (p - sum); // what rounding p lost (Fast2Sum again: |tail| < sum)
    const std::int32_t n1 = ni >> 1, n2 = ni - n1;
    const float scale1 = std::bit_cast<float>(static_cast<std::uint32_t>(n1 + 127) << 23);
    const float scale2 = std::bit_cast<float>(static_cast<std::uint32_t>(n2 + 127) << 23);
    return {p * scale1 * scale2, p_lo * scale1 * scale2};
}

/// e^x for every float32 x (see exp_parts). Max error 0.78 ulp.
inline float exp(float x) { return exp_parts(x).hi; }

/// tanh z for every float32 z; ±1 for ±inf and wherever tanh rounds to ±1, NaN for NaN, −0 for −0.
/// Max error 1.02 ulp.
///
/// Below |z| = 0.75, where 1 − 2/(e^{2|z|} + 1) would lose bits to cancellation, an odd polynomial
/// z + z³ Q(z²) with Q of degree 6 fitted (minimax, relative error 8e-11) to tanh on [0, 0.75]; above
/// it 1 − 2/(e^{2|z|} + 1) with z's sign. Both are computed and one is selected, so there is no branch;
/// the unused one may overflow or be NaN, harmlessly.
inline float tanh(float z) {
    constexpr float threshold = 0.75f;
    constexpr float q0 = -3.333333135e-01f, q1 = 1.333327740e-01f, q2 = -5.395957455e-02f, q3 = 2.180433832e-02f,
                    q4 = -8.596594445e-03f, q5 = 2.969616093e-03f, q6 = -6.327545270e-04f;

    const float a = std::fabs(z);
    const float s = a * a;
    const float q = q0 + s * (q1 + s * (q2 + s * (q3 + s * (q4 + s * (q5 + s * q6)))));
    const float near_zero = a + a * s * q;
    const float e = detail::exp(2.0f * a); // +inf for large |z|, and then the quotient is 0
    const float far = 1.0f - 2.0f / (e + 1.0f);
    // tanh |z| with z's sign (so −0 stays −0). NaN: the comparison is false, and `far` is NaN.
    return std::copysign(a < threshold ? near_zero : far, z);
}

/// 1 / (1 + e^−x) for every float32 x, without overflow: with e = e^−|x| ≤ 1 it is 1 / (1 + e) for
/// x ≥ 0 and e / (1 + e) for x < 0; 1 and 0 for ±inf, NaN for NaN. Max error 1.17 ulp.
///
/// Rounding e and 1 + e to float32 would each cost up to an ulp of the result, so both are kept with
/// their rounding errors (exp_parts, Fast2Sum) and the quotient q0 = num / d is corrected to first
/// order: num_exact / d_exact = q0 + (num_lo − q0·d_lo) / d.
inline float sigmoid(float x) {
    const ExpParts e = detail::exp_parts(-std::fabs(x));
    const float d = 1.0f + e.hi;
    const float d_lo = ((1.0f - d) + e.hi) + e.lo; // 1 + e = d + d_lo
    const bool negative = x < 0.0f;
    const float num = negative ? e.hi : 1.0f, num_lo = negative ? e.lo : 0.0f;
    const float q0 = num / d;
    return q0 + (num_lo - q0 * d_lo) / d;
}

} // namespace mixprec::autodiff::detail
