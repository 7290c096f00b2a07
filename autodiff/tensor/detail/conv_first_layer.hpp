#pragma once
// Internal: the forward pass of a convolution of one input channel by 3 × 3 filters (a first layer: the cnn
// model's 1 → 32 at 28 × 28) on float32 operands (x and w of any dtype widened, exactly), with its bias, on
// AVX-512 (arch/conv_first_layer_avx512.cpp) or AVX2 (arch/conv_first_layer_avx2.cpp: the same arithmetic
// 8 lanes at a time, the same bits), taken by the oneDNN route that widens its operands in place of
// oneDNN's float32 primitive where it applies: alone (conv2d, whose caller rounds the results), and with
// the ReLU, the rounding to the output's dtype and 2 × 2 max pooling in the same pass (conv2d_max_pool), so
// that the layer's output, the largest tensor of the model, is never written. In the cnn's float32 step
// (batch 128, two threads, Intel Xeon Skylake-SP), oneDNN's primitive and the pooling of its blocked output
// took 1.75 to 1.86 ms, this pass 1.16 to 1.41; in the mixed_float16 step, 8.1 ms against 1.3 to 1.6
// (bench/README.md, "Results, 2026-11-29, afternoon" and "evening"). At the avx2 level oneDNN 2.6's
// primitive for this layer is its jit:avx2 one, about twice as slow as im2col there (bench_layers).
//
// Each result is the sum oneDNN's jit:avx512_core kernel makes, bit for bit: from 0, one FMA a tap, the
// taps row by row, then the bias added (compared on all 2,768,896 outputs of the cnn's batch). conv2d and
// conv2d_max_pool both take these sums, so the two ops and the fused one agree on any CPU, whatever oneDNN
// runs there. Lanes are 16 output columns of a row (conv2d), or 16 pooling windows of a row of windows
// (conv2d_max_pool: each image's columns split into even and odd ones first, so that a window's four
// outputs lie in four vectors).

#include <mixprec/autodiff/tensor/dtype.hpp>
#include <mixprec/autodiff/tensor/isa.hpp>

#include <cstddef>
#include <cstdint>

namespace mixprec::autodiff::detail {

/// n images of one channel h × w (h, w ≥ 3), o filters of 3 × 3, stride 1, no dilation, no padding: outputs
/// (h − 2) × (w − 2).
struct first_layer_shape {
    std::size_t n, h, w, o;
};

/// Whether the passes below run: at the avx2 level and above of an x86-64 build, for shapes of 32-bit
/// indices.
inline bool first_layer_pass_applies(const first_layer_shape& s) {
#if defined(MIXPREC_X86_KERNELS)
    return isa() >= Isa::avx2 && s.h >= 3 && s.w >= 3 && s.n * s.o * (s.h - 2) * (s.w - 2) <= 0xffffffffu;
#else
    (void)s;
    return false;
#endif
}

/// y (N, O, H − 2, W − 2) = w ⊛ x + bias (null: none), float32 sums, written whole. On the threads of a team.
#if defined(MIXPREC_X86_KERNELS)
void first_layer_forward_avx512(const first_layer_shape& s, const float* x, const float* w, const float* bias,
                                float* y);
void first_layer_forward_avx2(const first_layer_shape& s, const float* x, const float* w, const float* bias, float* y);
inline void first_layer_forward(const first_layer_shape& s, const float* x, const float* w, const float* bias,
                                float* y) {
    if (isa() >= Isa::avx512) return first_layer_forward_avx512(s, x, w, bias, y);
    first_layer_forward_avx2(s, x, w, bias, y);
}
#else
inline void first_layer_forward(const first_layer_shape&, const float*, const float*, const float*, float*) {}
#endif

/// Whether first_layer_pooled stores its maxima in `dtype`.
inline bool first_layer_pools_to(Dtype dtype) {
    return dtype == Dtype::float32 || dtype == Dtype::float16 || dtype == Dtype::bfloat16;
}

/// The same convolution through the ReLU when `relu`, each output then rounded to `dtype` (float32, float16
/// or bfloat16: first_layer_pools_to) as conv2d's output of that dtype holds it, pooled in 2 × 2 windows
/// with stride 2 (the odd last row and column of an output in none): each window's maximum into pooled
/// (N, O, (H − 2) / 2, (W − 2) / 2), of that dtype, and the index of its argmax in the convolution's output
/// into idx (as max_pool2d keeps it), the four scanned in the order (0, 0), (0, 1), (1, 0), (1, 1), a
/// larger value or the first NaN replacing the one before. On the threads of a team.
#if defined(MIXPREC_X86_KERNELS)
void first_layer_pooled_avx512(const first_layer_shape& s, const float* x, const float* w, const float* bias, bool relu,
                               Dtype dtype, void* pooled, std::uint32_t* idx);
void first_layer_pooled_avx2(const first_layer_shape& s, const float* x, const float* w, const float* bias, bool relu,
                             Dtype dtype, void* pooled, std::uint32_t* idx);
inline void first_layer_pooled(const first_layer_shape& s, const float* x, const float* w, const float* bias, bool relu,
                               Dtype dtype, void* pooled, std::uint32_t* idx) {
    if (isa() >= Isa::avx512) return first_layer_pooled_avx512(s, x, w, bias, relu, dtype, pooled, idx);
    first_layer_pooled_avx2(s, x, w, bias, relu, dtype, pooled, idx);
}
#else // never called: first_layer_pass_applies is false
inline void first_layer_pooled(const first_layer_shape&, const float*, const float*, const float*, bool, Dtype, void*,
                               std::uint32_t*) {}
#endif

} // namespace mixprec::autodiff::detail
