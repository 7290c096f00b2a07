#pragma once
// Internal: elementwise optimizer updates with AVX-512 whose lanes near underflow run in double (why and
// how: optim/detail/lanes.hpp). Include only from translation units compiled for AVX-512 F/BW/VL/DQ
// (optim/arch/).

#include <mixprec/optim/detail/lanes.hpp>

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#if !defined(__clang__) // GCC 12's conversion intrinsics leave their unused mask operand undefined on purpose
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace mixprec::optim::detail::avx512 {

/// 16 floats with float arithmetic, for a rule of optim/detail/lanes.hpp.
struct Floats16 {
    __m512 v;
    Floats16(__m512 x) : v(x) {}
    explicit Floats16(float c) : v(_mm512_set1_ps(c)) {}
};
inline Floats16 operator+(Floats16 a, Floats16 b) { return _mm512_add_ps(a.v, b.v); }
inline Floats16 operator-(Floats16 a, Floats16 b) { return _mm512_sub_ps(a.v, b.v); }
inline Floats16 operator*(Floats16 a, Floats16 b) { return _mm512_mul_ps(a.v, b.v); }
inline Floats16 operator/(Floats16 a, Floats16 b) { return _mm512_div_ps(a.v, b.v); }
inline Floats16 sqrt(Floats16 a) { return _mm512_sqrt_ps(a.v); }
inline Floats16 larger(Floats16 a, Floats16 b) { return _mm512_max_ps(b.v, a.v); } // b if b > a, as std::max

/// |x| − 1 as unsigned: below 2^e − 1 where x is nonzero and below 2^e in magnitude.
inline __m512i magnitude_less_one(Floats16 x) {
    return _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(x.v), _mm512_set1_epi32(0x7fffffff)),
                            _mm512_set1_epi32(1)); // 0 wraps around to the top
}

/// The lanes where one of the values is nonzero and below 2^e in magnitude.
template <class... Values>
__mmask16 below(int e, Floats16 first, Values... rest) {
    __m512i least = magnitude_less_one(first);
    ((least = _mm512_min_epu32(least, magnitude_less_one(rest))), ...);
    const int bound = (127 + e) << 23; // the bits of 2^e
    return _mm512_cmplt_epu32_mask(least, _mm512_set1_epi32(bound - 1));
}

/// 8 floats held as doubles, every result rounded to float: the arithmetic of Floats16 without its slow
/// path for subnormal numbers.
struct Rounded8 {
    __m512d v;
    /// x rounded to float.
    Rounded8(__m512d x) : v(_mm512_cvtps_pd(_mm512_cvtpd_ps(x))) {}
    explicit Rounded8(float c) : v(_mm512_set1_pd(c)) {}
    /// 8 floats, widened.
    explicit Rounded8(__m256 x) : v(_mm512_cvtps_pd(x)) {}
};
inline Rounded8 operator+(Rounded8 a, Rounded8 b) { return _mm512_add_pd(a.v, b.v); }
inline Rounded8 operator-(Rounded8 a, Rounded8 b) { return _mm512_sub_pd(a.v, b.v); }
inline Rounded8 operator*(Rounded8 a, Rounded8 b) { return _mm512_mul_pd(a.v, b.v); }
inline Rounded8 operator/(Rounded8 a, Rounded8 b) { return _mm512_div_pd(a.v, b.v); }
inline Rounded8 sqrt(Rounded8 a) { return _mm512_sqrt_pd(a.v); }
inline Rounded8 larger(Rounded8 a, Rounded8 b) { return _mm512_max_pd(b.v, a.v); }

/// A rule's update in double of 16 lanes, in two halves of 8.
template <class Rule>
Lanes<Floats16> in_double16(const Rule& rule, const Lanes<Floats16>& x) {
    const auto half = [&](int h) {
        const auto widen = [h](Floats16 a) {
            const __m256 part =
                h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1)) : _mm512_castps512_ps256(a.v);
            return Rounded8(part);
        };
        Lanes<Rounded8> y{widen(x.w), widen(x.s0), widen(x.s1), widen(x.s2), widen(x.g)};
        rule(y);
        return y;
    };
    const Lanes<Rounded8> lo = half(0), hi = half(1);
    const auto join = [](Rounded8 l, Rounded8 h) {
        return Floats16(
            _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(l.v))),
                                                _mm256_castps_pd(_mm512_cvtpd_ps(h.v)), 1)));
    };
    return {join(lo.w, hi.w), join(lo.s0, hi.s0), join(lo.s1, hi.s1), join(lo.s2, hi.s2), x.g};
}

/// f applied to each of x's five vectors.
template <class F>
Lanes<Floats16> each(const Lanes<Floats16>& x, F f) {
    return {f(x.w.v), f(x.s0.v), f(x.s1.v), f(x.s2.v), f(x.g.v)};
}

/// Lanes near underflow that come few to a block, gathered in registers from block to block (their
/// original values and offsets) and updated in double 16 at a time, their results scattered back.
template <class Rule>
class Gathered {
  public:
    Gathered(const Rule& rule, const Arrays& a) : rule_(rule), a_(a) {}

    /// Adds the lanes `lanes` of x, the block at offset i.
    void add(const Lanes<Floats16>& x, std::uint32_t i, __mmask16 lanes) {
        const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const unsigned added = unsigned(__builtin_popcount(lanes));
        // The new lanes, packed, then moved up behind the `count_` waiting ones.
        const __m512i up = _mm512_sub_epi32(iota, _mm512_set1_epi32(int(count_)));
        const auto behind = __mmask16(0xffffu << count_);
        const Lanes<Floats16> packed = each(x, [&](__m512 v) { return _mm512_maskz_compress_ps(lanes, v); });
        const __m512i at = _mm512_maskz_compress_epi32(lanes, _mm512_add_epi32(_mm512_set1_epi32(int(i)), iota));
        const auto place = [&](Floats16& to, Floats16 from) {
            to = _mm512_mask_permutexvar_ps(to.v, behind, up, from.v);
        };
        place(waiting_.w, packed.w);
        place(waiting_.s0, packed.s0);
        place(waiting_.s1, packed.s1);
        place(waiting_.s2, packed.s2);
        place(waiting_.g, packed.g);
        at_ = _mm512_mask_permutexvar_epi32(at_, behind, up, at);
        count_ += added;
        if (count_ < 16) return;
        update(waiting_, at_, 0xffff);
        // What did not fit moves down to the front.
        count_ -= 16;
        const __m512i down = _mm512_add_epi32(iota, _mm512_set1_epi32(int(added - count_)));
        waiting_ = each(packed, [&](__m512 v) { return _mm512_permutexvar_ps(down, v); });
        at_ = _mm512_permutexvar_epi32(down, at);
    }

    /// Updates the lanes still waiting.
    void finish() {
        if (count_) update(waiting_, at_, __mmask16((1u << count_) - 1));
        count_ = 0;
    }

  private:
    void update(const Lanes<Floats16>& x, __m512i at, __mmask16 lanes) {
        const Lanes<Floats16> y = in_double16(rule_, x);
        _mm512_mask_i32scatter_ps(a_.w, lanes, at, y.w.v, 4);
        const Floats16 s[3] = {y.s0, y.s1, y.s2};
        for (int k = 0; k < Rule::slots; ++k) _mm512_mask_i32scatter_ps(a_.s[k], lanes, at, s[k].v, 4);
    }

    const Rule& rule_;
    Arrays a_;
    Lanes<Floats16> waiting_{_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                             _mm512_setzero_ps()};
    __m512i at_ = _mm512_setzero_si512();
    unsigned count_ = 0; // < 16 between calls
};

/// rule over [0, n): 16 lanes at a time on Floats16, and when `in_double` the lanes rule.near_underflow
/// picks on Rounded8, in place when a block holds 8 or more of them, else gathered. At most 2^30 elements
/// (the offsets of gathered lanes are 32-bit; optimizers split longer arrays).
template <class Rule>
void by_blocks(std::size_t n, const Arrays& a, const Rule& rule, bool in_double) {
    Gathered<Rule> gathered(rule, a);
    const auto load = [&](std::size_t i, __mmask16 in, int k) {
        return k < Rule::slots ? _mm512_maskz_loadu_ps(in, a.s[k] + i) : _mm512_setzero_ps();
    };
    const auto store = [&](std::size_t i, __mmask16 lanes, const Lanes<Floats16>& y) {
        _mm512_mask_storeu_ps(a.w + i, lanes, y.w.v);
        const Floats16 s[3] = {y.s0, y.s1, y.s2};
        for (int k = 0; k < Rule::slots; ++k) _mm512_mask_storeu_ps(a.s[k] + i, lanes, s[k].v);
    };
    for (std::size_t i = 0; i < n; i += 16) {
        const __mmask16 in = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        Lanes<Floats16> x{_mm512_maskz_loadu_ps(in, a.w + i), load(i, in, 0), load(i, in, 1), load(i, in, 2),
                          _mm512_maskz_loadu_ps(in, a.g + i)};
        const __mmask16 slow = in_double ? rule.near_underflow(x) & in : 0, fast = in & __mmask16(~slow);
        if (slow) {
            if (__builtin_popcount(slow) >= 8)
                store(i, slow, in_double16(rule, x));
            else
                gathered.add(x, std::uint32_t(i), slow);
            if (!fast) continue;
            // The float lanes see zeros there, which are fast.
            x = each(x, [&](__m512 v) { return _mm512_maskz_mov_ps(fast, v); });
        }
        rule(x);
        store(i, fast, x);
    }
    gathered.finish();
}

/// by_blocks over arrays of any length, 2^30 elements at a time.
template <class Rule>
void in_blocks(std::size_t n, const Arrays& a, const Rule& rule, bool in_double) {
    constexpr std::size_t most = std::size_t{1} << 30;
    for (std::size_t i = 0; i < n; i += most) {
        by_blocks(std::min(most, n - i), part_of(a, i), rule, in_double);
    }
}

} // namespace mixprec::optim::detail::avx512
