#include "unscale.hpp"

#include "../autodiff/convert.hpp"

#include <cfloat>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
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

using floats16 = float __attribute__((vector_size(64)));  // lowered to what each clone's ISA has
using ints16 = std::int32_t __attribute__((vector_size(64)));

/// Scales p[0..n) in place by `inv`; returns (all finite, Σ p²). GCC clones it for AVX-512, AVX2 and
/// the baseline and picks one when the library loads; the 16-lane vector type becomes one, two or
/// four registers accordingly.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
[[gnu::target_clones("avx512f", "avx2", "default")]]
#endif
UnscaleResult scale_chunk(float* p, std::size_t n, float inv) {
    const floats16 vinv = floats16{} + inv, vmax = floats16{} + FLT_MAX;
    floats16 squares{};
    ints16 bad{};
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        floats16 v;
        std::memcpy(&v, p + i, sizeof v);
        v *= vinv;
        std::memcpy(p + i, &v, sizeof v);
        squares += v * v;
        const floats16 magnitude = v < 0 ? -v : v;
        bad |= ~(magnitude <= vmax); // all ones where v is inf or NaN
    }
    UnscaleResult r;
    for (int k = 0; k < 16; ++k) {
        r.squared_norm += squares[k];
        r.finite = r.finite && bad[k] == 0;
    }
    for (; i < n; ++i) {
        const float v = p[i] * inv;
        p[i] = v;
        r.squared_norm += double(v) * v;
        r.finite = r.finite && std::fabs(v) <= FLT_MAX;
    }
    return r;
}

} // namespace

UnscaleResult unscale(const autodiff::Tensor& grad, float inverse_scale, std::span<float> out) {
    if (out.size() != grad.size())
        throw std::invalid_argument("unscale: output holds " + std::to_string(out.size()) + " floats for a " +
                                    grad.description() + " gradient");
    const auto* bytes = static_cast<const std::byte*>(grad.raw());
    const std::size_t width = autodiff::size_of(grad.dtype());
    const bool stream = grad.size() > stream_above;
    alignas(64) float buffer[chunk];
    UnscaleResult total;
    for (std::size_t i = 0; i < grad.size(); i += chunk) {
        const std::size_t n = std::min(chunk, grad.size() - i);
        // Streamed results go through an L1 buffer (streaming stores want whole aligned blocks);
        // the others are widened straight into `out` and scaled there.
        float* chunk_out = stream ? buffer : out.data() + i;
        autodiff::widen(bytes + i * width, grad.dtype(), chunk_out, n);
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
