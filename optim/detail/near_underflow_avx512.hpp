#pragma once
// Internal: elementwise optimizer updates with AVX-512 whose lanes near underflow run in double. Include
// only from translation units compiled for AVX-512 F/BW/VL/DQ (optim/arch/).
//
// An optimizer's state decays toward zero for a weight whose gradient stays exactly zero (a pixel that is
// 0 in every image, a dead unit) until the decrement rounds to zero, and then sits at a few multiples of
// 2^-149 for good. Float arithmetic on subnormal numbers takes a microcode assist per instruction on many
// Intel cores (about 100 times a normal multiply on the Xeon of bench/README.md). A rule below computes
// such lanes in double, each operation's result rounded to float before the next uses it: for +, −, ×, ÷
// and √ of floats the double result rounded once to float is the correctly rounded float result
// (53 ≥ 2·24 + 2 bits; the subnormal grid is coarser still), so the bits are those of float arithmetic,
// while converting subnormal floats to double and back takes no slow path. (Written with intrinsics: GCC
// narrows float(double(a) op double(b)) back to a float operation, as the same theorem allows it to.)

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#if !defined(__clang__) // GCC 12's conversion intrinsics leave their unused mask operand undefined on purpose
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace mixprec::optim::detail {

/// 16 lanes of weights, up to three slots (Adam: m, v, v_max; SGD: the momentum buffer) and the gradient.
struct Lanes16 {
    __m512 w, s0, s1, s2, g;
};
/// 8 of them, for arithmetic in double.
struct Lanes8 {
    __m256 w, s0, s1, s2, g;
};

/// x rounded to float, kept in double.
inline __m512d to_float(__m512d x) { return _mm512_cvtps_pd(_mm512_cvtpd_ps(x)); }

/// Whether |x| is nonzero and below 2^e, lane by lane.
inline __mmask16 below(__m512 x, int e) {
    const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
    const int bound = (127 + e) << 23; // the bits of 2^e
    return _mm512_cmplt_epu32_mask(_mm512_sub_epi32(magnitude, _mm512_set1_epi32(1)),
                                   _mm512_set1_epi32(bound - 1)); // 0 wraps around to the top
}

/// A rule's update in double of 16 lanes, in two halves of 8.
template <class Rule>
Lanes16 in_double16(const Rule& rule, const Lanes16& x) {
    const auto low = [](__m512 a) { return _mm512_castps512_ps256(a); };
    const auto high = [](__m512 a) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); };
    const auto join = [](__m256 lo, __m256 hi) {
        return _mm512_castpd_ps(
            _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
    };
    const Lanes8 lo = rule.in_double(Lanes8{low(x.w), low(x.s0), low(x.s1), low(x.s2), low(x.g)});
    const Lanes8 hi = rule.in_double(Lanes8{high(x.w), high(x.s0), high(x.s1), high(x.s2), high(x.g)});
    return {join(lo.w, hi.w), join(lo.s0, hi.s0), join(lo.s1, hi.s1), join(lo.s2, hi.s2), x.g};
}

/// The arrays of one update: the weights and Rule::slots slot arrays are read and written, g read.
struct Arrays {
    float* w;
    float* s[3];
    const float* g;
};

/// Lanes near underflow that come few to a block, gathered in registers from block to block (their
/// original values and offsets) and updated in double 16 at a time, their results scattered back.
template <class Rule>
class Gathered {
  public:
    Gathered(const Rule& rule, const Arrays& a) : rule_(rule), a_(a) {}

    /// Adds the lanes `lanes` of x, the block at offset i.
    void add(const Lanes16& x, std::uint32_t i, __mmask16 lanes) {
        const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const unsigned added = unsigned(__builtin_popcount(lanes));
        // The new lanes, packed, then moved up behind the `count_` waiting ones.
        const __m512i up = _mm512_sub_epi32(iota, _mm512_set1_epi32(int(count_)));
        const auto behind = __mmask16(0xffffu << count_);
        const Lanes16 packed{_mm512_maskz_compress_ps(lanes, x.w), _mm512_maskz_compress_ps(lanes, x.s0),
                             _mm512_maskz_compress_ps(lanes, x.s1), _mm512_maskz_compress_ps(lanes, x.s2),
                             _mm512_maskz_compress_ps(lanes, x.g)};
        const __m512i at = _mm512_maskz_compress_epi32(lanes, _mm512_add_epi32(_mm512_set1_epi32(int(i)), iota));
        const auto place = [&](__m512& to, __m512 from) { to = _mm512_mask_permutexvar_ps(to, behind, up, from); };
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
        waiting_ = {_mm512_permutexvar_ps(down, packed.w), _mm512_permutexvar_ps(down, packed.s0),
                    _mm512_permutexvar_ps(down, packed.s1), _mm512_permutexvar_ps(down, packed.s2),
                    _mm512_permutexvar_ps(down, packed.g)};
        at_ = _mm512_permutexvar_epi32(down, at);
    }

    /// Updates the lanes still waiting.
    void finish() {
        if (count_) update(waiting_, at_, __mmask16((1u << count_) - 1));
        count_ = 0;
    }

  private:
    void update(const Lanes16& x, __m512i at, __mmask16 lanes) {
        const Lanes16 y = in_double16(rule_, x);
        _mm512_mask_i32scatter_ps(a_.w, lanes, at, y.w, 4);
        const __m512 s[3] = {y.s0, y.s1, y.s2};
        for (int k = 0; k < Rule::slots; ++k) _mm512_mask_i32scatter_ps(a_.s[k], lanes, at, s[k], 4);
    }

    const Rule& rule_;
    Arrays a_;
    Lanes16 waiting_{_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    __m512i at_ = _mm512_setzero_si512();
    unsigned count_ = 0; // < 16 between calls
};

/// rule over [0, n): 16 lanes at a time in float (rule.in_float), the lanes rule.near_underflow picks in
/// double (rule.in_double) in place when a block holds 8 or more of them, else gathered. At most 2^30
/// elements (the offsets of gathered lanes are 32-bit; optimizers split longer arrays).
template <class Rule>
void by_blocks(std::size_t n, const Arrays& a, const Rule& rule) {
    Gathered<Rule> gathered(rule, a);
    const auto load = [&](std::size_t i, __mmask16 in, int k) {
        return k < Rule::slots ? _mm512_maskz_loadu_ps(in, a.s[k] + i) : _mm512_setzero_ps();
    };
    const auto store = [&](std::size_t i, __mmask16 lanes, const Lanes16& y) {
        _mm512_mask_storeu_ps(a.w + i, lanes, y.w);
        const __m512 s[3] = {y.s0, y.s1, y.s2};
        for (int k = 0; k < Rule::slots; ++k) _mm512_mask_storeu_ps(a.s[k] + i, lanes, s[k]);
    };
    for (std::size_t i = 0; i < n; i += 16) {
        const __mmask16 in = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        Lanes16 x{_mm512_maskz_loadu_ps(in, a.w + i), load(i, in, 0), load(i, in, 1), load(i, in, 2),
                  _mm512_maskz_loadu_ps(in, a.g + i)};
        const __mmask16 slow = rule.near_underflow(x) & in, fast = in & __mmask16(~slow);
        if (slow) {
            if (__builtin_popcount(slow) >= 8)
                store(i, slow, in_double16(rule, x));
            else
                gathered.add(x, std::uint32_t(i), slow);
            if (!fast) continue;
            // The float lanes see zeros there, which are fast.
            x = {_mm512_maskz_mov_ps(fast, x.w), _mm512_maskz_mov_ps(fast, x.s0), _mm512_maskz_mov_ps(fast, x.s1),
                 _mm512_maskz_mov_ps(fast, x.s2), _mm512_maskz_mov_ps(fast, x.g)};
        }
        store(i, fast, rule.in_float(x));
    }
    gathered.finish();
}

/// by_blocks over arrays of any length, 2^30 elements at a time.
template <class Rule>
void in_blocks(std::size_t n, Arrays a, const Rule& rule) {
    constexpr std::size_t most = std::size_t{1} << 30;
    for (std::size_t i = 0; i < n; i += most) {
        Arrays part{a.w + i, {}, a.g + i};
        for (int k = 0; k < Rule::slots; ++k) part.s[k] = a.s[k] + i;
        by_blocks(std::min(most, n - i), part, rule);
    }
}

} // namespace mixprec::optim::detail
