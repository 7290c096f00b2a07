#include "unscale.hpp"

#include "../autodiff/convert.hpp"

#include <xsimd/xsimd.hpp>

#include <cfloat>
#include <stdexcept>
#include <string>

namespace mixprec::amp {
namespace {

constexpr std::size_t chunk = 4096; // floats: widened and scaled while still in L1

/// Scales p[0..n) in place by `inv`; returns (all finite, Σ p²) with float partial sums per chunk.
UnscaleResult scale_chunk(float* p, std::size_t n, float inv) {
    using batch = xsimd::batch<float>;
    constexpr std::size_t w = batch::size;
    const batch vinv(inv), vmax(FLT_MAX);
    batch sq(0.0f);
    auto ok = batch(0.0f) == batch(0.0f); // all true
    std::size_t i = 0;
    for (; i + w <= n; i += w) {
        const batch v = batch::load_unaligned(p + i) * vinv;
        v.store_unaligned(p + i);
        sq = xsimd::fma(v, v, sq);
        ok = ok & (xsimd::abs(v) <= vmax); // false for inf and NaN
    }
    UnscaleResult r{xsimd::all(ok), double(xsimd::hadd(sq))};
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
    UnscaleResult total;
    for (std::size_t i = 0; i < grad.size(); i += chunk) {
        const std::size_t n = std::min(chunk, grad.size() - i);
        autodiff::widen(bytes + i * width, grad.dtype(), out.data() + i, n);
        const UnscaleResult r = scale_chunk(out.data() + i, n, inverse_scale);
        total.finite = total.finite && r.finite;
        total.squared_norm += r.squared_norm;
    }
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
