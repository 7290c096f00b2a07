// The bfloat16 convolution's weights pass on AVX512-BF16 (conv_weights_bf16.hpp). Compiled with the
// AVX-512 flags; its kernels carry the avx512bf16 target and run only at the avx512_bf16 level.
#include <mixprec/autodiff/tensor/detail/conv_weights_bf16.hpp>
#include <mixprec/autodiff/tensor/detail/grown.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mixprec::autodiff::detail {
namespace {

constexpr std::size_t block = bf16_weights_block;

/// Image pairs (2m, 2m + 1) of x interleaved, in blocks of 16 channels: element (m, cb, r, q, c) holds
/// x[2m][16·cb + c][r][q] in its low half and x[2m + 1][16·cb + c][r][q] in its high half, the two values
/// a lane multiplies at one place; a block's 16 channels at one place fill one cache line.
void x_pairs(const conv_shape& s, const std::uint16_t* x, std::uint32_t* pairs) {
    const std::size_t plane = s.h * s.w, image = s.c * plane;
    split(s.n / 2, 1, [&](std::size_t m0, std::size_t m1) {
        for (std::size_t m = m0; m < m1; ++m)
            for (std::size_t cb = 0; cb < s.c / block; ++cb) {
                std::uint32_t* out = pairs + (m * s.c + cb * block) * plane;
                for (std::size_t c = 0; c < block; ++c) {
                    const std::uint16_t* a = x + 2 * m * image + (cb * block + c) * plane;
                    const std::uint16_t* b = a + image;
                    for (std::size_t q = 0; q < plane; ++q) out[q * block + c] = a[q] | std::uint32_t{b[q]} << 16;
                }
            }
    });
}

/// The sums of one item: filters [16·ob, 16·ob + 16) by channels [16·cb, 16·cb + 16) at tap (ky, kx), over
/// every image pair and place in order; with `bias`, also the filters' dy summed (one float32 add a term).
/// sums[c·16 + o] for channel 16·cb + c and filter 16·ob + o; bias_sums[o].
template <bool bias>
[[gnu::target("avx512bf16")]] void item(const conv_shape& s, const std::uint32_t* pairs, const std::uint16_t* dy,
                                        std::size_t ob, std::size_t cb, std::size_t ky, std::size_t kx, float* sums,
                                        float* bias_sums) {
    const std::size_t places = s.ho * s.wo, plane = s.h * s.w, dy_image = s.o * places;
    // lanes 2o and 2o + 1 of the pair vector: filter o of the first image, then of the second
    alignas(64) static constexpr std::uint16_t interleave[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                                 37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                                 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i order = _mm512_load_si512(interleave);
    __m512 acc[block];
    for (auto& a : acc) a = _mm512_setzero_ps();
    __m512 acc_bias = _mm512_setzero_ps();
    for (std::size_t m = 0; m < s.n / 2; ++m) {
        const std::uint16_t* d0 = dy + 2 * m * dy_image + ob * places * block;
        const std::uint16_t* d1 = d0 + dy_image;
        const std::uint32_t* xm = pairs + (m * s.c + cb * block) * plane + (ky * s.w + kx) * block;
        for (std::size_t i = 0; i < s.ho; ++i)
            for (std::size_t j = 0; j < s.wo; ++j) {
                const std::size_t p = i * s.wo + j;
                const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d0 + p * block));
                const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d1 + p * block));
                const auto v = reinterpret_cast<__m512bh>(
                    _mm512_permutex2var_epi16(_mm512_castsi256_si512(a), order, _mm512_castsi256_si512(b)));
                const std::uint32_t* xp = xm + (i * s.w + j) * block;
#pragma GCC unroll 16
                for (std::size_t c = 0; c < block; ++c)
                    acc[c] = _mm512_dpbf16_ps(acc[c], v,
                                              reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(xp[c]))));
                if constexpr (bias) {
                    acc_bias =
                        _mm512_add_ps(acc_bias, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(a), 16)));
                    acc_bias =
                        _mm512_add_ps(acc_bias, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
                }
            }
    }
    for (std::size_t c = 0; c < block; ++c) _mm512_storeu_ps(sums + c * block, acc[c]);
    if constexpr (bias) _mm512_storeu_ps(bias_sums, acc_bias);
}

} // namespace

void bf16_weights_pass(const conv_shape& s, const void* x, const void* dy, float* dw, float* db) {
    thread_local std::vector<std::uint32_t> buffer; // this thread's; the team reads it through `pairs`
    std::uint32_t* const pairs = grown(buffer, s.n / 2 * s.c * s.h * s.w);
    x_pairs(s, static_cast<const std::uint16_t*>(x), pairs);
    const auto* d = static_cast<const std::uint16_t*>(dy);
    const std::size_t filter_blocks = s.o / block, channel_blocks = s.c / block, taps = s.kh * s.kw;
    split(filter_blocks * taps * channel_blocks, 1, [&](std::size_t first, std::size_t end) {
        alignas(64) float sums[block * block], bias_sums[block];
        for (std::size_t k = first; k < end; ++k) {
            const std::size_t ob = k / (taps * channel_blocks), tap = k / channel_blocks % taps,
                              cb = k % channel_blocks;
            const bool with_bias = db != nullptr && tap == 0 && cb == 0;
            if (with_bias)
                item<true>(s, pairs, d, ob, cb, tap / s.kw, tap % s.kw, sums, bias_sums);
            else
                item<false>(s, pairs, d, ob, cb, tap / s.kw, tap % s.kw, sums, bias_sums);
            for (std::size_t c = 0; c < block; ++c)
                for (std::size_t o = 0; o < block; ++o)
                    dw[((ob * block + o) * s.c + cb * block + c) * taps + tap] = sums[c * block + o];
            if (with_bias)
                for (std::size_t o = 0; o < block; ++o) db[ob * block + o] = bias_sums[o];
        }
    });
}

} // namespace mixprec::autodiff::detail
