#pragma once
// Internal: conv2d through oneDNN's convolution primitives (conv_onednn.cpp), called by conv2d
// (ops_conv.cpp) for ConvBackend::onednn, and for bfloat16 at the avx512_bf16 level by default.

#include <cstddef>

namespace mixprec::autodiff::detail {

/// What x, w and dy hold: float32 (float32 tensors, and float16 ones widened exactly), or bfloat16.
enum class conv_operands : unsigned char { f32, bf16 };

struct conv_shape {
    std::size_t n, c, h, w, o, kh, kw, ho, wo, stride[2], dilation[2], padding[2];
    conv_operands operands;
};

/// x, w, dy hold s.operands (NCHW / OIHW); bias (or null), y, dx (or null: not computed), dw, db (or
/// null) float32, written whole. oneDNN never rounds here: the caller rounds each result once.
void onednn_conv_forward(const conv_shape& s, const void* x, const void* w, const float* bias, float* y);
void onednn_conv_backward(const conv_shape& s, const void* x, const void* w, const void* dy, float* dx, float* dw,
                          float* db);

} // namespace mixprec::autodiff::detail
