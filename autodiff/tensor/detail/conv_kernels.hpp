#pragma once
// Internal: conv2d through oneDNN's convolution primitives (conv_onednn.cpp), called by conv2d
// (ops_conv.cpp) for ConvBackend::onednn, and for bfloat16 at the avx512_bf16 level by default.

#include <cstddef>
#include <functional>

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

/// onednn_conv_forward with y handed over image by image instead of written whole: image(n, v) gets image
/// n's float32 results (O, Ho, Wo) in v, this thread's scratch, to use and overwrite. Called once for
/// each image, on the threads of a team.
using conv_image_sink = std::function<void(std::size_t n, float* v)>;
void onednn_conv_forward_images(const conv_shape& s, const void* x, const void* w, const float* bias,
                                const conv_image_sink& image);

/// onednn_conv_backward with dy made image by image: dy_image(n, dst) writes image n of dy (O, Ho, Wo),
/// in s.operands' type, at dst. Called once for each image, on the threads of a team. oneDNN reads the
/// images in the layout its primitives want, into which each is reordered while in cache.
using conv_image_source = std::function<void(std::size_t n, void* dst)>;
void onednn_conv_backward_images(const conv_shape& s, const void* x, const void* w, const conv_image_source& dy_image,
                                 float* dx, float* dw, float* db);

} // namespace mixprec::autodiff::detail
