#include <mixprec/amp/unscale.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mixprec::amp {
namespace {

constexpr std::size_t chunk = 4096; // floats: widened and scaled while still in L1
/// Chunks a thread takes at least (128 KiB of float32 results): smaller gradients are unscaled on one thread.
constexpr std::size_t min_chunks = 8;
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

/// Runs part(c0, c1, sums) on consecutive pieces of the chunks [0, chunks), one per thread; part writes chunk
/// c's partial result to sums[c]. Returns them all, for the caller to fold in chunk order: the same bits
/// on any number of threads.
template <class Sum, class Part>
std::vector<Sum> by_chunk(std::size_t chunks, Part part) {
    std::vector<Sum> sums(chunks);
    autodiff::detail::split(chunks, min_chunks, [&](std::size_t c0, std::size_t c1) { part(c0, c1, sums.data()); });
    return sums;
}

/// The chunks' results of the portable pass, folded in chunk order.
UnscaleResult in_order(const std::vector<UnscaleResult>& chunks) {
    UnscaleResult total;
    for (const UnscaleResult& r : chunks) {
        total.finite = total.finite && r.finite;
        total.squared_norm += r.squared_norm;
    }
    return total;
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
#if !defined(__clang__) // GCC 12's conversion intrinsics leave their unused mask operand undefined on purpose
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
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

/// How whole vectors of results are stored: plainly, or streamed (past the caches) in 64-byte vectors where
/// dst is 64-byte aligned, in four 16-byte quarters where it is 16-byte aligned.
enum class stores { plain, stream64, stream16 };

/// dst[i..i+16) = src[i..i+16) × inv (lanes in m), folded into `sums`.
template <autodiff::Dtype D, stores S>
[[MIXPREC_AVX512, gnu::always_inline]] inline void unscale16(const void* src, float* dst, std::size_t i, __mmask16 m,
                                                             __m512 inv, avx512_sums& sums, int acc) {
    constexpr int inf_or_nan = 0x01 | 0x08 | 0x10 | 0x80; // fpclass: QNaN, +inf, -inf, SNaN
    const __m512 v = _mm512_mul_ps(load16<D>(src, i, m), inv);
    if (m != 0xffff) {
        _mm512_mask_storeu_ps(dst + i, m, v);
    } else if constexpr (S == stores::stream64) {
        _mm512_stream_ps(dst + i, v);
    } else if constexpr (S == stores::stream16) {
        _mm_stream_ps(dst + i, _mm512_castps512_ps128(v));
        _mm_stream_ps(dst + i + 4, _mm512_extractf32x4_ps(v, 1));
        _mm_stream_ps(dst + i + 8, _mm512_extractf32x4_ps(v, 2));
        _mm_stream_ps(dst + i + 12, _mm512_extractf32x4_ps(v, 3));
    } else {
        _mm512_storeu_ps(dst + i, v);
    }
    sums.squares[acc] = _mm512_fmadd_ps(v, v, sums.squares[acc]);
    sums.bad |= _mm512_fpclass_ps_mask(v, inf_or_nan);
}

/// The float squares of `sums`, widened to double lane by lane and added in pairs; the float sums start
/// again from zero.
[[MIXPREC_AVX512, gnu::always_inline]] inline __m512d widened(avx512_sums& sums) {
    const __m512 s = _mm512_add_ps(sums.squares[0], sums.squares[1]);
    const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
    sums.squares[0] = sums.squares[1] = _mm512_setzero_ps();
    return _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(s)), _mm512_cvtps_pd(high));
}

/// How the AVX-512 pass splits n values: chunks of whole 32-value steps from the first value (the last chunk
/// shorter), then a tail of fewer than 32. Where the chunks begin does not depend on dst, so neither do the
/// squared norm's bits; results past the caches are streamed when dst's alignment allows.
struct avx512_layout {
    std::size_t n, body, chunks;
    stores whole;
    avx512_layout(const float* dst, std::size_t size)
        : n(size), body(size / 32 * 32), chunks((body + chunk - 1) / chunk), whole(stores::plain) {
        const auto address = reinterpret_cast<std::uintptr_t>(dst);
        if (n > stream_above)
            whole = address % 64 == 0 ? stores::stream64 : address % 16 == 0 ? stores::stream16 : whole;
    }
};

/// A chunk's squares (widened()) and the lanes that saw inf or NaN.
struct avx512_chunk {
    alignas(64) double squares[8];
    __mmask16 bad;
};

[[MIXPREC_AVX512, gnu::always_inline]] inline __mmask16 mask(std::size_t left) {
    return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
}

/// Chunks [c0, c1) of the AVX-512 pass, on this thread, with stores S.
template <autodiff::Dtype D, stores S>
[[MIXPREC_AVX512]] void unscale_chunks(const avx512_layout& l, const void* src, float inverse_scale, float* dst,
                                       std::size_t c0, std::size_t c1, avx512_chunk* out) {
    const __m512 inv = _mm512_set1_ps(inverse_scale);
    avx512_sums sums{{_mm512_setzero_ps(), _mm512_setzero_ps()}};
    for (std::size_t c = c0; c < c1; ++c) {
        for (std::size_t i = c * chunk, end = std::min(l.body, (c + 1) * chunk); i < end; i += 32) {
            unscale16<D, S>(src, dst, i, 0xffff, inv, sums, 0);
            unscale16<D, S>(src, dst, i + 16, 0xffff, inv, sums, 1);
        }
        _mm512_store_pd(out[c].squares, widened(sums));
        out[c].bad = sums.bad;
        sums.bad = 0;
    }
    if constexpr (S != stores::plain) _mm_sfence(); // streaming stores are weakly ordered: make them visible
}

/// The tail, then every chunk's squares and the tail's added in chunk order in double lanes.
template <autodiff::Dtype D>
[[MIXPREC_AVX512]] UnscaleResult finish_avx512(const avx512_layout& l, const void* src, float inverse_scale, float* dst,
                                               const std::vector<avx512_chunk>& chunks) {
    const __m512 inv = _mm512_set1_ps(inverse_scale);
    avx512_sums sums{{_mm512_setzero_ps(), _mm512_setzero_ps()}};
    for (std::size_t i = l.body; i < l.n; i += 16)
        unscale16<D, stores::plain>(src, dst, i, mask(l.n - i), inv, sums, 0);
    __m512d total = _mm512_setzero_pd();
    __mmask16 bad = sums.bad;
    for (const avx512_chunk& c : chunks) {
        total = _mm512_add_pd(total, _mm512_load_pd(c.squares));
        bad |= c.bad;
    }
    total = _mm512_add_pd(total, widened(sums));
    UnscaleResult r;
    r.finite = bad == 0;
    r.squared_norm = _mm512_reduce_add_pd(total);
    return r;
}

/// The AVX-512 pass for float32, float16 and bfloat16 gradients: widened in registers, never through a
/// buffer. Results larger than the caches go out with streaming stores (as the copy it is measured against
/// does). Squares are summed in float within a chunk and the chunks' sums in double lanes, in chunk order,
/// on however many threads the chunks were spread over.
template <autodiff::Dtype D>
UnscaleResult unscale_avx512(const void* src, float inverse_scale, float* dst, std::size_t n) {
    const avx512_layout l(dst, n);
    const std::vector<avx512_chunk> chunks =
        by_chunk<avx512_chunk>(l.chunks, [&](std::size_t c0, std::size_t c1, avx512_chunk* out) {
            if (l.whole == stores::stream64)
                unscale_chunks<D, stores::stream64>(l, src, inverse_scale, dst, c0, c1, out);
            else if (l.whole == stores::stream16)
                unscale_chunks<D, stores::stream16>(l, src, inverse_scale, dst, c0, c1, out);
            else
                unscale_chunks<D, stores::plain>(l, src, inverse_scale, dst, c0, c1, out);
        });
    return finish_avx512<D>(l, src, inverse_scale, dst, chunks);
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
    const auto chunks = by_chunk<UnscaleResult>(
        (size + chunk - 1) / chunk, [&](std::size_t c0, std::size_t c1, UnscaleResult* results) {
            alignas(64) float buffer[chunk];
            for (std::size_t c = c0; c < c1; ++c) {
                const std::size_t i = c * chunk, n = std::min(chunk, size - i);
                // Streamed results go through an L1 buffer (streaming stores want whole aligned blocks);
                // the others are widened straight into `out` and scaled there.
                float* chunk_out = stream ? buffer : out.data() + i;
                autodiff::widen(bytes + i * width, dtype, chunk_out, n);
                results[c] = scale_chunk(chunk_out, n, inverse_scale);
                if (stream) store(out.data() + i, buffer, n);
            }
#if defined(__SSE2__)
            if (stream) _mm_sfence(); // streaming stores are weakly ordered: make them visible before returning
#endif
        });
    return in_order(chunks);
}

UnscaleResult unscale_in_place(std::span<float> values, float inverse_scale) {
    const auto chunks = by_chunk<UnscaleResult>(
        (values.size() + chunk - 1) / chunk, [&](std::size_t c0, std::size_t c1, UnscaleResult* results) {
            for (std::size_t c = c0; c < c1; ++c)
                results[c] =
                    scale_chunk(values.data() + c * chunk, std::min(chunk, values.size() - c * chunk), inverse_scale);
        });
    return in_order(chunks);
}

} // namespace mixprec::amp
