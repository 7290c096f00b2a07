#pragma once
// Internal: the weights' and bias's gradients of a bfloat16 convolution from AVX512-BF16's pairwise dot
// products (arch/conv_weights_avx512_bf16.cpp), taken by the oneDNN route (conv_onednn_plan.cpp) in place
// of oneDNN's weights pass where it applies. oneDNN 2.6's pass ran the cnn's second convolution at 0.53 to
// 0.66 of the vdpbf16ps roof where its forward and data passes reached 0.85 to 0.9; this one at 0.78 to
// 0.85 (bench_layers, AMD EPYC Zen 4).
//
// vdpbf16ps adds two products to each float32 lane: here the products of two images at the same place,
// so that a lane's pair of x values lies side by side once the images are interleaved, however wide the
// rows. A lane holds one filter; sixteen accumulators, one a channel, take a block of sixteen filters at
// one tap, and each (block of filters, tap, block of channels) is summed whole by one thread over the
// image pairs and places in order: the same bits for any number of threads. A product of two bfloat16
// values is exact in float32, so each costs one rounding, as a term of a float32 sum does; as in oneDNN's
// kernels on this instruction, subnormal inputs and sums of dw count as 0. db sums dy in float32 adds.

#include <mixprec/autodiff/tensor/detail/conv_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>
#include <mixprec/autodiff/tensor/isa.hpp>

#include <cstddef>

namespace mixprec::autodiff::detail {

/// Filters a vector holds, and channels a thread's sixteen accumulators take.
constexpr std::size_t bf16_weights_block = 16;

/// Whether bf16_weights_pass computes shape s's gradients: bfloat16 operands, stride 1, no dilation, no
/// padding, an even batch, channels and filters in multiples of 16, at the avx512_bf16 level, where oneDNN
/// does not use AMX (whose tile products do beat it: on an Intel Xeon with AMX the cnn's bfloat16 step ran
/// 1.9× faster on oneDNN's tile kernels than at MIXPREC_ISA=avx512_bf16 with this pass).
/// (Defined here, not in the kernel's file: that file is built for AVX-512 and this runs at every level.)
inline bool bf16_weights_pass_applies(const conv_shape& s) {
    return s.operands == conv_operands::bf16 && isa() >= Isa::avx512_bf16 && !onednn_amx() && s.stride[0] == 1 &&
           s.stride[1] == 1 && s.dilation[0] == 1 && s.dilation[1] == 1 && s.padding[0] == 0 && s.padding[1] == 0 &&
           s.n > 0 && s.n % 2 == 0 && s.c > 0 && s.c % bf16_weights_block == 0 && s.o > 0 &&
           s.o % bf16_weights_block == 0 && s.ho == s.h - s.kh + 1 && s.wo == s.w - s.kw + 1;
}

/// dw (O, C, KH, KW) and, unless null, db (O) in float32, written whole, from x (bfloat16, NCHW) and dy
/// (bfloat16 in blocks of 16 channels: oneDNN's aBcd16b). On the threads of a team.
void bf16_weights_pass(const conv_shape& s, const void* x, const void* dy, float* dw, float* db);

} // namespace mixprec::autodiff::detail
