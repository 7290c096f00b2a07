// AVX2 + F16C conversion kernels. Compiled with -mavx2 -mf16c -mfma; run only when the CPU has them.
#include <mixprec/autodiff/tensor/detail/convert_kernels.hpp>

#include <immintrin.h>

namespace mixprec::autodiff::detail {
namespace {

void narrow_f16(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<std::uint16_t*>(dst);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
    for (; i < n; ++i) out[i] = float16(src[i]).bits();
}

void widen_f16(const void* src, float* dst, std::size_t n) {
    const auto* in = static_cast<const std::uint16_t*>(src);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    for (; i < n; ++i) dst[i] = float(float16::from_bits(in[i]));
}

} // namespace

const convert_kernels& avx2_kernels() {
    static const convert_kernels table = [] {
        convert_kernels k = generic_kernels();
        k.narrow[static_cast<int>(Dtype::float16)] = narrow_f16;
        k.widen[static_cast<int>(Dtype::float16)] = widen_f16;
        return k;
    }();
    return table;
}

} // namespace mixprec::autodiff::detail
