#pragma once
// Internal: bfloat16 conv2d through oneDNN's convolution primitives (conv_onednn.cpp), called by
// conv2d (ops_conv.cpp) on CPUs with AVX512-BF16.

#include <cstddef>

namespace mixprec::autodiff::detail {

struct conv_bf16_shape {
    std::size_t n, c, h, w, o, kh, kw, ho, wo, stride[2], dilation[2], padding[2];
};

/// x, w, dy bfloat16 (NCHW / OIHW); bias (or null), y, dx, dw, db (or null) float32, written whole.
/// oneDNN never rounds to bfloat16 here: the caller rounds each result once.
void onednn_conv_bf16_forward(const conv_bf16_shape& s, const void* x, const void* w, const float* bias, float* y);
void onednn_conv_bf16_backward(const conv_bf16_shape& s, const void* x, const void* w, const void* dy, float* dx,
                               float* dw, float* db);

} // namespace mixprec::autodiff::detail
