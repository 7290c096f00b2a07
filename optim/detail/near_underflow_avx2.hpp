#pragma once
// Internal: elementwise optimizer updates with AVX2 whose lanes near underflow run in double (why and how:
// optim/detail/lanes.hpp). Include only from translation units compiled for AVX2 (optim/arch/).

#include <mixprec/optim/detail/lanes.hpp>

#include <immintrin.h>

#include <cstddef>
#include <cstring>

namespace mixprec::optim::detail::avx2 {

/// 8 floats with float arithmetic, for a rule of optim/detail/lanes.hpp.
struct Floats8 {
    __m256 v;
    Floats8(__m256 x) : v(x) {}
    explicit Floats8(float c) : v(_mm256_set1_ps(c)) {}
};
inline Floats8 operator+(Floats8 a, Floats8 b) { return _mm256_add_ps(a.v, b.v); }
inline Floats8 operator-(Floats8 a, Floats8 b) { return _mm256_sub_ps(a.v, b.v); }
inline Floats8 operator*(Floats8 a, Floats8 b) { return _mm256_mul_ps(a.v, b.v); }
inline Floats8 operator/(Floats8 a, Floats8 b) { return _mm256_div_ps(a.v, b.v); }
inline Floats8 sqrt(Floats8 a) { return _mm256_sqrt_ps(a.v); }
inline Floats8 larger(Floats8 a, Floats8 b) { return _mm256_max_ps(b.v, a.v); } // b if b > a, as std::max

/// |x| − 1 as unsigned: below 2^e − 1 where x is nonzero and below 2^e in magnitude.
inline __m256i magnitude_less_one(Floats8 x) {
    return _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(x.v), _mm256_set1_epi32(0x7fffffff)),
                            _mm256_set1_epi32(1)); // 0 wraps around to the top
}

/// 1 if, in some lane, one of the values is nonzero and below 2^e in magnitude, else 0.
template <class... Values>
unsigned below(int e, Floats8 first, Values... rest) {
    __m256i least = magnitude_less_one(first);
    ((least = _mm256_min_epu32(least, magnitude_less_one(rest))), ...);
    const __m256i most = _mm256_set1_epi32(((127 + e) << 23) - 2);               // the bits of 2^e, less 2
    const __m256i in = _mm256_cmpeq_epi32(_mm256_min_epu32(least, most), least); // least ≤ most
    return unsigned(!_mm256_testz_si256(in, in));
}

/// 4 floats held as doubles, every result rounded to float: the arithmetic of Floats8 without its slow
/// path for subnormal numbers.
struct Rounded4 {
    __m256d v;
    /// x rounded to float.
    Rounded4(__m256d x) : v(_mm256_cvtps_pd(_mm256_cvtpd_ps(x))) {}
    explicit Rounded4(float c) : v(_mm256_set1_pd(c)) {}
    /// 4 floats, widened.
    explicit Rounded4(__m128 x) : v(_mm256_cvtps_pd(x)) {}
};
inline Rounded4 operator+(Rounded4 a, Rounded4 b) { return _mm256_add_pd(a.v, b.v); }
inline Rounded4 operator-(Rounded4 a, Rounded4 b) { return _mm256_sub_pd(a.v, b.v); }
inline Rounded4 operator*(Rounded4 a, Rounded4 b) { return _mm256_mul_pd(a.v, b.v); }
inline Rounded4 operator/(Rounded4 a, Rounded4 b) { return _mm256_div_pd(a.v, b.v); }
inline Rounded4 sqrt(Rounded4 a) { return _mm256_sqrt_pd(a.v); }
inline Rounded4 larger(Rounded4 a, Rounded4 b) { return _mm256_max_pd(b.v, a.v); }

/// A rule's update in double of 8 lanes, in two halves of 4.
template <class Rule>
Lanes<Floats8> in_double8(const Rule& rule, const Lanes<Floats8>& x) {
    const auto half = [&](int h) {
        const auto widen = [h](Floats8 a) {
            return Rounded4(h ? _mm256_extractf128_ps(a.v, 1) : _mm256_castps256_ps128(a.v));
        };
        Lanes<Rounded4> y{widen(x.w), widen(x.s0), widen(x.s1), widen(x.s2), widen(x.g)};
        rule(y);
        return y;
    };
    const Lanes<Rounded4> lo = half(0), hi = half(1);
    const auto join = [](Rounded4 l, Rounded4 h) {
        return Floats8(_mm256_set_m128(_mm256_cvtpd_ps(h.v), _mm256_cvtpd_ps(l.v)));
    };
    return {join(lo.w, hi.w), join(lo.s0, hi.s0), join(lo.s1, hi.s1), join(lo.s2, hi.s2), x.g};
}

/// The 8 lanes of a from element i on.
template <class Rule>
[[gnu::always_inline]] inline Lanes<Floats8> load(const Arrays& a, std::size_t i) {
    const auto slot = [&](int k) { return k < Rule::slots ? _mm256_loadu_ps(a.s[k] + i) : _mm256_setzero_ps(); };
    return {_mm256_loadu_ps(a.w + i), slot(0), slot(1), slot(2), _mm256_loadu_ps(a.g + i)};
}

/// Stores the weights and slots of x as the 8 lanes of a from element i on.
template <class Rule>
[[gnu::always_inline]] inline void store(const Arrays& a, std::size_t i, const Lanes<Floats8>& x) {
    _mm256_storeu_ps(a.w + i, x.w.v);
    const Floats8 y[3] = {x.s0, x.s1, x.s2};
    for (int k = 0; k < Rule::slots; ++k) _mm256_storeu_ps(a.s[k] + i, y[k].v);
}

/// rule on Rounded4 over the 8 lanes of a from element i on. Out of line, so that the float path keeps its
/// values in registers.
template <class Rule>
[[gnu::noinline]] void in_double_at(const Rule& rule, const Arrays& a, std::size_t i) {
    store<Rule>(a, i, in_double8(rule, load<Rule>(a, i)));
}

/// rule over [0, n): 8 lanes at a time on Floats8, and when `in_double` a block holding a lane that
/// rule.near_underflow picks on Rounded4 (every lane of it: the same bits).
template <class Rule>
void in_blocks(std::size_t n, const Arrays& a, const Rule& rule, bool in_double) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        Lanes<Floats8> x = load<Rule>(a, i);
        if (in_double && rule.near_underflow(x)) {
            in_double_at(rule, a, i);
            continue;
        }
        rule(x);
        store<Rule>(a, i, x);
    }
    if (i == n) return;
    // The last n mod 8 lanes, through a block of copies whose other lanes are zeros (which are fast).
    const std::size_t bytes = (n - i) * sizeof(float);
    float w[8] = {}, s[3][8] = {}, g[8] = {};
    const Arrays part = part_of(a, i), copies{w, {s[0], s[1], s[2]}, g};
    std::memcpy(w, part.w, bytes);
    std::memcpy(g, part.g, bytes);
    for (int k = 0; k < Rule::slots; ++k) std::memcpy(s[k], part.s[k], bytes);
    in_blocks(8, copies, rule, in_double);
    std::memcpy(part.w, w, bytes);
    for (int k = 0; k < Rule::slots; ++k) std::memcpy(part.s[k], s[k], bytes);
}

} // namespace mixprec::optim::detail::avx2
