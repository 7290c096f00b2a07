#include <mixprec/amp/unscale.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mixprec::amp {
namespace {

constexpr std::size_t chunk = 4096; // floats: widened and scaled while still in L1
/// Above this many elements the result will not stay in cache for the optimizer anyway, so it is
/// written with streaming stores, which skip reading the destination first (as memcpy does).
constexpr std::size_t stream_above = std::size_t{1} << 20;

/// dst[0..n) = src[0..n), bypassing the caches when dst is 16-byte aligned.
void store(float* dst, const float* src, std::size_t n) {
#if defined(__SSE2__)
    if (reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) {
        std::size_t i = 0;
        for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_load_ps(src + i));
        std::memcpy(dst + i, src + i, (n - i) * sizeof(float));
        return;
    }
#endif
    std::memcpy(dst, src, n * sizeof(float));
}

using floats8 = float __attribute__((vector_size(32))); // AVX2 and AVX-512: one register
using floats4 = float __attribute__((vector_size(16))); // the SSE2 baseline

/// Scales p[0..n) in place by `inv`; returns (all finite, Σ p²). Run at the vector width of the
/// instruction-set level (scale_chunk below). Squares are summed in 16 float lanes, kept as 16 / lanes
/// vectors V (8 lanes at AVX2 and AVX-512, 4 at the SSE2 baseline: GCC 12 splits a 16-lane vector type
/// badly, through the stack), and every width sums the same lanes in the same order, so all give the same
/// bits.
template <class V>
[[gnu::always_inline]] inline UnscaleResult scale_lanes(float* p, std::size_t n, float inv) {
    using Mask = decltype(V{} < V{});
    constexpr std::size_t width = sizeof(V) / sizeof(float), parts = 16 / width;
    const V vinv = V{} + inv, vmax = V{} + FLT_MAX;
    V squares[parts];
    Mask bad[parts];
    std::memset(squares, 0, sizeof squares);
    std::memset(bad, 0, sizeof bad);
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (std::size_t h = 0; h < parts; ++h) {
            V v;
            std::memcpy(&v, p + i + width * h, sizeof v);
            v *= vinv;
            std::memcpy(p + i + width * h, &v, sizeof v);
            squares[h] += v * v;
            const V magnitude = v < 0 ? -v : v;
            bad[h] |= ~(magnitude <= vmax); // all ones where v is inf or NaN
        }
    static_assert(sizeof squares == 16 * sizeof(float) && sizeof bad == 16 * sizeof(std::int32_t));
    float square_lanes[16];
    std::int32_t bad_lanes[16];
    std::memcpy(square_lanes, squares, sizeof square_lanes);
    std::memcpy(bad_lanes, bad, sizeof bad_lanes);
    UnscaleResult r;
    for (std::size_t k = 0; k < 16; ++k) {
        r.squared_norm += square_lanes[k];
        r.finite = r.finite && bad_lanes[k] == 0;
    }
    for (; i < n; ++i) {
        const float v = p[i] * inv;
        p[i] = v;
        r.squared_norm += double(v) * v;
        r.finite = r.finite && std::fabs(v) <= FLT_MAX;
    }
    return r;
}

UnscaleResult scale_chunk(float* p, std::size_t n, float inv) {
    if (autodiff::isa() >= autodiff::Isa::avx2)
        return autodiff::detail::vectorized([&] { return scale_lanes<floats8>(p, n, inv); });
    return autodiff::detail::vectorized([&] { return scale_lanes<floats4>(p, n, inv); });
}

#if defined(__x86_64__)
#if !defined(__clang__) // GCC 12's vcvtph2ps intrinsic leaves its unused mask operand undefined on purpose
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define MIXPREC_AVX512 gnu::target("avx512f,avx512bw,avx512vl,avx512dq")

/// 16 gradient elements of dtype D from src + i (lanes outside m read as zero), widened to float32.
template <autodiff::Dtype D>
[[MIXPREC_AVX512, gnu::always_inline]] inline __m512 load16(const void* src, std::size_t i, __mmask16 m) {
    if constexpr (D == autodiff::Dtype::float32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(src) + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const std::uint16_t*>(src) + i);
    if constexpr (D == autodiff::Dtype::float16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); // bfloat16
}

struct avx512_sums {
    __m512 squares[2];
    __mmask16 bad = 0; ///< lanes that saw inf or NaN
};

/// dst[i..i+16) = src[i..i+16) × inv (lanes in m), folded into `sums`.
template <autodiff::Dtype D, bool Stream>
[[MIXPREC_AVX512, gnu::always_inline]] inline void unscale16(const void* src, float* dst, std::size_t i, __mmask16 m,
                                                             __m512 inv, avx512_sums& sums, int acc) {
    constexpr int inf_or_nan = 0x01 | 0x08 | 0x10 | 0x80; // fpclass: QNaN, +inf, -inf, SNaN
    const __m512 v = _mm512_mul_ps(load16<D>(src, i, m), inv);
    if (m != 0xffff)
        _mm512_mask_storeu_ps(dst + i, m, v);
    else if constexpr (Stream)
        _mm512_stream_ps(dst + i, v);
    else
        _mm512_storeu_ps(dst + i, v);
    sums.squares[acc] = _mm512_fmadd_ps(v, v, sums.squares[acc]);
    sums.bad |= _mm512_fpclass_ps_mask(v, inf_or_nan);
}

/// total += the float squares of `sums`, widened to double; the float sums start again from zero.
[[MIXPREC_AVX512, gnu::always_inline]] inline void fold(avx512_sums& sums, __m512d& total) {
    const __m512 s = _mm512_add_ps(sums.squares[0], sums.squares[1]);
    const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
    total = _mm512_add_pd(total, _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(s)), _mm512_cvtps_pd(high)));
    sums.squares[0] = sums.squares[1] = _mm512_setzero_ps();
}

/// The AVX-512 pass for float32, float16 and bfloat16 gradients: widened in registers, never through a
/// buffer. Results larger than the caches go out with 64-byte streaming stores once dst is aligned (as
/// the copy it is measured against does). Squares are summed in float within a chunk and the chunk's
/// sums in double, as in the portable pass.
template <autodiff::Dtype D>
[[MIXPREC_AVX512]] UnscaleResult unscale_avx512(const void* src, float inverse_scale, float* dst, std::size_t n) {
    const __m512 inv = _mm512_set1_ps(inverse_scale);
    avx512_sums sums{{_mm512_setzero_ps(), _mm512_setzero_ps()}};
    __m512d total = _mm512_setzero_pd();
    const auto mask = [](std::size_t left) { return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1); };
    const bool stream = n > stream_above;
    std::size_t i = 0;
    if (stream) { // a masked head brings dst to a 64-byte boundary
        i = std::min(n, ((64 - reinterpret_cast<std::uintptr_t>(dst) % 64) % 64) / sizeof(float));
        if (i > 0) unscale16<D, false>(src, dst, 0, mask(i), inv, sums, 0);
    }
    while (i + 32 <= n) {
        const std::size_t end = std::min(n, i + chunk) - 31;
        for (; i < end; i += 32) {
            if (stream) {
                unscale16<D, true>(src, dst, i, 0xffff, inv, sums, 0);
                unscale16<D, true>(src, dst, i + 16, 0xffff, inv, sums, 1);
            } else {
                unscale16<D, false>(src, dst, i, 0xffff, inv, sums, 0);
                unscale16<D, false>(src, dst, i + 16, 0xffff, inv, sums, 1);
            }
        }
        fold(sums, total);
    }
    if (stream) _mm_sfence(); // streaming stores are weakly ordered: make them visible before returning
    for (; i < n; i += 16) unscale16<D, false>(src, dst, i, mask(n - i), inv, sums, 0);
    fold(sums, total);
    UnscaleResult r;
    r.finite = sums.bad == 0;
    r.squared_norm = _mm512_reduce_add_pd(total);
    return r;
}
#undef MIXPREC_AVX512
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif

} // namespace

UnscaleResult unscale(const autodiff::Tensor& grad, float inverse_scale, std::span<float> out) {
    if (out.size() != grad.size())
        throw std::invalid_argument("unscale: output holds " + std::to_string(out.size()) + " floats for a " +
                                    grad.description() + " gradient");
    return unscale(grad.raw(), grad.dtype(), inverse_scale, out);
}

UnscaleResult unscale(const void* values, autodiff::Dtype dtype, float inverse_scale, std::span<float> out) {
    const std::size_t size = out.size();
#if defined(__x86_64__)
    const autodiff::Dtype d = dtype;
    if ((d == autodiff::Dtype::float32 || d == autodiff::Dtype::float16 || d == autodiff::Dtype::bfloat16) &&
        autodiff::isa() >= autodiff::Isa::avx512)
        return d == autodiff::Dtype::float32
                   ? unscale_avx512<autodiff::Dtype::float32>(values, inverse_scale, out.data(), size)
               : d == autodiff::Dtype::float16
                   ? unscale_avx512<autodiff::Dtype::float16>(values, inverse_scale, out.data(), size)
                   : unscale_avx512<autodiff::Dtype::bfloat16>(values, inverse_scale, out.data(), size);
#endif
    const auto* bytes = static_cast<const std::byte*>(values);
    const std::size_t width = autodiff::size_of(dtype);
    const bool stream = size > stream_above;
    alignas(64) float buffer[chunk];
    UnscaleResult total;
    for (std::size_t i = 0; i < size; i += chunk) {
        const std::size_t n = std::min(chunk, size - i);
        // Streamed results go through an L1 buffer (streaming stores want whole aligned blocks);
        // the others are widened straight into `out` and scaled there.
        float* chunk_out = stream ? buffer : out.data() + i;
        autodiff::widen(bytes + i * width, dtype, chunk_out, n);
        const UnscaleResult r = scale_chunk(chunk_out, n, inverse_scale);
        if (stream) store(out.data() + i, buffer, n);
        total.finite = total.finite && r.finite;
        total.squared_norm += r.squared_norm;
    }
#if defined(__SSE2__)
    if (stream) _mm_sfence(); // streaming stores are weakly ordered: make them visible before returning
#endif
    return total;
}

UnscaleResult unscale_in_place(std::span<float> values, float inverse_scale) {
    UnscaleResult total;
    for (std::size_t i = 0; i < values.size(); i += chunk) {
        const UnscaleResult r = scale_chunk(values.data() + i, std::min(chunk, values.size() - i), inverse_scale);
        total.finite = total.finite && r.finite;
        total.squared_norm += r.squared_norm;
    }
    return total;
}

} // namespace mixprec::amp
