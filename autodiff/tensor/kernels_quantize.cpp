#include <mixprec/autodiff/tensor/kernels_quantize.hpp>

#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>
#include <mixprec/autodiff/tensor/stochastic_rounding.hpp>

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mixprec::autodiff::kernels {

float amax(const Tensor& x) {
    // Magnitudes of finite floats order as their bit patterns, so the maximum is kept as an integer (signed,
    // which GCC vectorizes: every magnitude pattern is below 2^31).
    std::atomic<std::int32_t> top{0};
    detail::for_each_chunk(x.size(), [&](std::size_t i, std::size_t n) {
        std::array<float, detail::chunk> scratch;
        const float* v = detail::floats_at(x, i, n, scratch);
        std::int32_t m = 0;
        for (std::size_t j = 0; j < n; ++j) {
            const std::int32_t a = std::bit_cast<std::int32_t>(v[j]) & 0x7FFFFFFF;
            const std::int32_t finite = a < 0x7F800000 ? a : 0;
            m = finite > m ? finite : m;
        }
        std::int32_t seen = top.load(std::memory_order_relaxed);
        while (m > seen && !top.compare_exchange_weak(seen, m, std::memory_order_relaxed)) {}
    });
    return std::bit_cast<float>(top.load());
}

Tensor quantize(const Tensor& x, float scale, Dtype format, Overflow overflow,
                std::optional<std::uint64_t> stochastic) {
    if (!(scale > 0.0f) || !std::isfinite(scale))
        throw std::invalid_argument("quantize: the scale must be positive and finite, got " + std::to_string(scale));
    if (size_of(format) >= size_of(Dtype::float32))
        throw std::invalid_argument("quantize: " + std::string(name_of(format)) +
                                    " is not narrower than float32 (quantize into float16, bfloat16, cbfloat16 or "
                                    "an FP8 format)");
    Tensor out = Tensor::uninitialized(x.shape(), format);
    RoundingBatch rounding(out);
    detail::for_each_chunk(x.size(), [&](std::size_t i, std::size_t n) {
        std::array<float, detail::chunk> in, scaled;
        const float* v = detail::floats_at(x, i, n, in);
        for (std::size_t j = 0; j < n; ++j) scaled[j] = v[j] * scale;
        if (stochastic)
            narrow_stochastic(scaled.data(), detail::bytes_at(out, i), n, format, *stochastic, i, overflow);
        else
            narrow(scaled.data(), detail::bytes_at(out, i), n, format, rounding, overflow);
    });
    return out;
}

} // namespace mixprec::autodiff::kernels
