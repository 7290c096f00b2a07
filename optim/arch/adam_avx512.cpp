// Adam's update with AVX-512 (compiled with -mavx512f, -mavx512bw, -mavx512vl, -mavx512dq): 16 lanes at
// a time in float, the lanes near underflow in double (optim/detail/adam_step.hpp says why and why the bits
// are the same). The expressions follow adam_loop in optim/adam.cpp operation by operation.

#include <mixprec/optim/detail/adam_step.hpp>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#if !defined(__clang__) // GCC 12's conversion intrinsics leave their unused mask operand undefined on purpose
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace mixprec::optim::detail {
namespace {

/// 16 lanes of weights, slots and gradient in float (v_max unused without AMSGrad), and 8 of them.
struct Lanes16 {
    __m512 w, m, v, v_max, g;
};
struct Lanes8 {
    __m256 w, m, v, v_max, g;
};

/// The update in float, rounding as adam_loop does. max(v, v_max) keeps v_max unless v is greater,
/// as std::max(v_max, v) does.
template <bool amsgrad>
inline Lanes16 in_float(Lanes16 x, const AdamCoefficients& k) {
    const __m512 c1 = _mm512_set1_ps(k.c1), b2 = _mm512_set1_ps(k.b2), c2 = _mm512_set1_ps(k.c2),
                 eps = _mm512_set1_ps(k.eps), step_size = _mm512_set1_ps(k.step_size),
                 bc2_sqrt = _mm512_set1_ps(k.bc2_sqrt), decay = _mm512_set1_ps(k.decay);
    const __m512 m = _mm512_add_ps(x.m, _mm512_mul_ps(c1, _mm512_sub_ps(x.g, x.m)));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, x.v), _mm512_mul_ps(_mm512_mul_ps(c2, x.g), x.g));
    const __m512 v_max = amsgrad ? _mm512_max_ps(v, x.v_max) : v;
    const __m512 denominator = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v_max), bc2_sqrt), eps);
    const __m512 w = _mm512_sub_ps(_mm512_mul_ps(x.w, decay), _mm512_div_ps(_mm512_mul_ps(step_size, m), denominator));
    return {w, m, v, v_max, x.g};
}

/// x rounded to float, kept in double.
inline __m512d to_float(__m512d x) { return _mm512_cvtps_pd(_mm512_cvtpd_ps(x)); }

/// The same update on 8 lanes in double, each operation's result rounded to float: the same bits.
template <bool amsgrad>
inline Lanes8 in_double(Lanes8 x, const AdamCoefficients& k) {
    const __m512d c1 = _mm512_set1_pd(k.c1), b2 = _mm512_set1_pd(k.b2), c2 = _mm512_set1_pd(k.c2),
                  eps = _mm512_set1_pd(k.eps), step_size = _mm512_set1_pd(k.step_size),
                  bc2_sqrt = _mm512_set1_pd(k.bc2_sqrt), decay = _mm512_set1_pd(k.decay);
    const __m512d w0 = _mm512_cvtps_pd(x.w), m0 = _mm512_cvtps_pd(x.m), v0 = _mm512_cvtps_pd(x.v),
                  g = _mm512_cvtps_pd(x.g);
    const __m512d m = to_float(_mm512_add_pd(m0, to_float(_mm512_mul_pd(c1, to_float(_mm512_sub_pd(g, m0))))));
    const __m512d v = to_float(
        _mm512_add_pd(to_float(_mm512_mul_pd(b2, v0)), to_float(_mm512_mul_pd(to_float(_mm512_mul_pd(c2, g)), g))));
    const __m512d v_max = amsgrad ? _mm512_max_pd(v, _mm512_cvtps_pd(x.v_max)) : v;
    const __m512d denominator =
        to_float(_mm512_add_pd(to_float(_mm512_div_pd(to_float(_mm512_sqrt_pd(v_max)), bc2_sqrt)), eps));
    const __m512d w = _mm512_sub_pd(to_float(_mm512_mul_pd(w0, decay)),
                                    to_float(_mm512_div_pd(to_float(_mm512_mul_pd(step_size, m)), denominator)));
    return {_mm512_cvtpd_ps(w), _mm512_cvtpd_ps(m), _mm512_cvtpd_ps(v), _mm512_cvtpd_ps(v_max), x.g};
}

/// Whether |x| is nonzero and below 2^e, lane by lane.
inline __mmask16 below(__m512 x, int e) {
    const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
    const int bound = (127 + e) << 23; // the bits of 2^e
    return _mm512_cmplt_epu32_mask(_mm512_sub_epi32(magnitude, _mm512_set1_epi32(1)),
                                   _mm512_set1_epi32(bound - 1)); // 0 wraps around to the top
}

/// Lanes whose float arithmetic may meet a subnormal: any state value below 2^-100 (subnormal, or a
/// moment whose product with the step size may be; decaying state crosses this band in a few hundred
/// steps and then sticks), or a gradient below 2^-60 (its square may be). Zeros are fast and excluded.
template <bool amsgrad>
inline __mmask16 near_underflow(const Lanes16& x) {
    __mmask16 r = below(x.w, -100) | below(x.m, -100) | below(x.v, -100) | below(x.g, -60);
    if (amsgrad) r |= below(x.v_max, -100);
    return r;
}

/// The update in double of the 16 lanes x (those of `lanes` that matter), in two halves.
template <bool amsgrad>
inline Lanes16 in_double16(const Lanes16& x, const AdamCoefficients& k) {
    const auto low = [](__m512 a) { return _mm512_castps512_ps256(a); };
    const auto high = [](__m512 a) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); };
    const auto join = [](__m256 lo, __m256 hi) {
        return _mm512_castpd_ps(
            _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
    };
    const Lanes8 lo = in_double<amsgrad>({low(x.w), low(x.m), low(x.v), low(x.v_max), low(x.g)}, k);
    const Lanes8 hi = in_double<amsgrad>({high(x.w), high(x.m), high(x.v), high(x.v_max), high(x.g)}, k);
    return {join(lo.w, hi.w), join(lo.m, hi.m), join(lo.v, hi.v), join(lo.v_max, hi.v_max), x.g};
}

/// Sparse lanes near underflow, gathered in registers from the blocks as they come (their original values
/// and offsets) and updated in double 16 at a time, their results scattered back.
template <bool amsgrad>
class Gathered {
  public:
    Gathered(float* w, float* m, float* v, float* v_max, const AdamCoefficients& k)
        : w_(w), m_(m), v_(v), v_max_(v_max), k_(k) {}

    /// Adds the lanes `lanes` of x, the block at offset i.
    void add(const Lanes16& x, std::uint32_t i, __mmask16 lanes) {
        const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const unsigned added = unsigned(__builtin_popcount(lanes));
        // The new lanes, packed, then moved up behind the `count_` waiting ones.
        const __m512i up = _mm512_sub_epi32(iota, _mm512_set1_epi32(int(count_)));
        const auto behind = __mmask16(0xffffu << count_);
        Lanes16 packed{_mm512_maskz_compress_ps(lanes, x.w), _mm512_maskz_compress_ps(lanes, x.m),
                       _mm512_maskz_compress_ps(lanes, x.v), _mm512_maskz_compress_ps(lanes, x.v_max),
                       _mm512_maskz_compress_ps(lanes, x.g)};
        const __m512i at = _mm512_maskz_compress_epi32(lanes, _mm512_add_epi32(_mm512_set1_epi32(int(i)), iota));
        const auto place = [&](__m512& to, __m512 from) { to = _mm512_mask_permutexvar_ps(to, behind, up, from); };
        place(waiting_.w, packed.w);
        place(waiting_.m, packed.m);
        place(waiting_.v, packed.v);
        place(waiting_.v_max, packed.v_max);
        place(waiting_.g, packed.g);
        at_ = _mm512_mask_permutexvar_epi32(at_, behind, up, at);
        count_ += added;
        if (count_ < 16) return;
        update(waiting_, at_, 0xffff);
        // What did not fit moves down to the front.
        count_ -= 16;
        const __m512i down = _mm512_add_epi32(iota, _mm512_set1_epi32(int(added - count_)));
        waiting_ = {_mm512_permutexvar_ps(down, packed.w), _mm512_permutexvar_ps(down, packed.m),
                    _mm512_permutexvar_ps(down, packed.v), _mm512_permutexvar_ps(down, packed.v_max),
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
        const Lanes16 y = in_double16<amsgrad>(x, k_);
        _mm512_mask_i32scatter_ps(w_, lanes, at, y.w, 4);
        _mm512_mask_i32scatter_ps(m_, lanes, at, y.m, 4);
        _mm512_mask_i32scatter_ps(v_, lanes, at, y.v, 4);
        if (amsgrad) _mm512_mask_i32scatter_ps(v_max_, lanes, at, y.v_max, 4);
    }

    float *w_, *m_, *v_, *v_max_;
    const AdamCoefficients& k_;
    Lanes16 waiting_{_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    __m512i at_ = _mm512_setzero_si512();
    unsigned count_ = 0; // < 16 between calls
};

/// At most 2^30 elements: the offsets of gathered lanes are 32-bit.
template <bool amsgrad>
void run(std::size_t n, float* w, float* m, float* v, float* v_max, const float* g, const AdamCoefficients& k) {
    Gathered<amsgrad> gathered(w, m, v, v_max, k);
    const auto store = [&](std::size_t i, __mmask16 lanes, const Lanes16& y) {
        _mm512_mask_storeu_ps(w + i, lanes, y.w);
        _mm512_mask_storeu_ps(m + i, lanes, y.m);
        _mm512_mask_storeu_ps(v + i, lanes, y.v);
        if (amsgrad) _mm512_mask_storeu_ps(v_max + i, lanes, y.v_max);
    };
    for (std::size_t i = 0; i < n; i += 16) {
        const __mmask16 in = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        Lanes16 x{_mm512_maskz_loadu_ps(in, w + i), _mm512_maskz_loadu_ps(in, m + i), _mm512_maskz_loadu_ps(in, v + i),
                  amsgrad ? _mm512_maskz_loadu_ps(in, v_max + i) : _mm512_setzero_ps(),
                  _mm512_maskz_loadu_ps(in, g + i)};
        const __mmask16 slow = near_underflow<amsgrad>(x) & in, fast = in & __mmask16(~slow);
        if (slow) {
            // Half the block or more: updated in place. Fewer: gathered with others.
            if (__builtin_popcount(slow) >= 8)
                store(i, slow, in_double16<amsgrad>(x, k));
            else
                gathered.add(x, std::uint32_t(i), slow);
            if (!fast) continue;
            // The float lanes see zeros there, which are fast.
            x = {_mm512_maskz_mov_ps(fast, x.w), _mm512_maskz_mov_ps(fast, x.m), _mm512_maskz_mov_ps(fast, x.v),
                 _mm512_maskz_mov_ps(fast, x.v_max), _mm512_maskz_mov_ps(fast, x.g)};
        }
        store(i, fast, in_float<amsgrad>(x, k));
    }
    gathered.finish();
}

template <bool amsgrad>
void run_all(std::size_t n, float* w, float* m, float* v, float* v_max, const float* g, const AdamCoefficients& c) {
    const AdamCoefficients k = c; // a local copy: no store can alias it, so its broadcasts leave the loop
    constexpr std::size_t most = std::size_t{1} << 30;
    for (std::size_t i = 0; i < n; i += most)
        run<amsgrad>(std::min(most, n - i), w + i, m + i, v + i, amsgrad ? v_max + i : nullptr, g + i, k);
}

} // namespace

void adam_avx512(std::size_t n, float* w, float* m, float* v, float* v_max, const float* g, const AdamCoefficients& k) {
    if (v_max)
        run_all<true>(n, w, m, v, v_max, g, k);
    else
        run_all<false>(n, w, m, v, nullptr, g, k);
}

} // namespace mixprec::optim::detail
