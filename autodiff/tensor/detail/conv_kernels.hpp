#pragma once
// Internal: conv2d through oneDNN's convolution primitives (conv_onednn.cpp), called by the convolution
// ops (ops_conv.cpp, ops_conv_pool.cpp) for ConvBackend::onednn, and for bfloat16 at the avx512_bf16 level
// by default.

#include <cstddef>
#include <cstdint>
#include <functional>

namespace mixprec::autodiff::detail {

/// What x, w and dy hold: float32 (float32 tensors, and float16 ones widened exactly), or bfloat16.
enum class conv_operands : unsigned char { f32, bf16 };

struct conv_shape {
    std::size_t n, c, h, w, o, kh, kw, ho, wo, stride[2], dilation[2], padding[2];
    conv_operands operands;
    /// What x holds, when not `operands`: bfloat16 for float32 primitives, which oneDNN's reorder of x into
    /// their layout widens (exactly) in the same pass.
    conv_operands x_holds = operands;
};

/// x holds s.x_holds, w and dy s.operands (NCHW / OIHW); bias (or null), y, dx (or null: not computed), dw, db
/// (or null) float32, written whole. oneDNN never rounds here: the caller rounds each result once.
/// A forward pass returns a number for its run (0 when its primitive reads x as x lies): handed to the
/// backward pass of the same x, on the same thread, it lets the weights pass read x as the forward
/// reordered it, when no pass of that shape has run in between (else x is reordered again; 0: always).
/// The backward passes take x as a function that gives it (conv_input), called only when they read x
/// itself, so that a caller that widens x to float32 first does so only then.
using conv_input = std::function<const void*()>;
std::uint64_t onednn_conv_forward(const conv_shape& s, const void* x, const void* w, const float* bias, float* y);
void onednn_conv_backward(const conv_shape& s, const conv_input& x, std::uint64_t forward_run, const void* w,
                          const void* dy, float* dx, float* dw, float* db);

/// How an image's values (O, Ho, Wo) lie in memory, by `block`: 0 for plain; else in blocks of that many
/// channels (8 or 16: oneDNN's aBcd8b and aBcd16b), element (o, i, j) at ((o / block)·Ho·Wo + i·Wo + j)·block
/// + o % block, the channels padded with zeros to a multiple of block; block = O (a multiple of 16) is
/// channels last (oneDNN's acdb, which its AMX kernels write and read): one block of every channel.

/// onednn_conv_forward with y handed over image by image instead of written whole: image(n, v, block) gets
/// image n's float32 results in v, to use and overwrite, laid out by block (as the primitive wrote them,
/// when it wrote a channel-blocked layout: no reorder). Called once for each image, on the threads of a
/// team. Where oneDNN can, each thread runs the primitive on its own images a few at a time and hands
/// them over while their results are in its cache (the same kernel, so the same bits as one run on the
/// whole batch).
using conv_image_sink = std::function<void(std::size_t n, float* v, std::size_t block)>;
std::uint64_t onednn_conv_forward_images(const conv_shape& s, const void* x, const void* w, const float* bias,
                                         const conv_image_sink& image);

/// onednn_conv_backward with dy made image by image, and dx handed over image by image: dy_image(n, dst,
/// block) writes image n of dy, in s.operands' type and laid out by block, at dst: in the layout the
/// primitives read when that is channel-blocked, else plain (and then reordered while in cache when the
/// primitives want another). dx_image(n, v, block) (null: dx not wanted) gets image n's float32 dx, to use
/// and overwrite, laid out by block: as the data pass wrote it when that is in blocks of 16 (block 16, the
/// AVX-512 levels' layout) or channels last (block C, a multiple of 16: AMX's), else plain (block 0); as
/// for the forward pass, each thread runs the data pass on its own images a few at a time where oneDNN can.
/// Each called once for each image, on the threads of a team.
using conv_image_source = std::function<void(std::size_t n, void* dst, std::size_t block)>;
void onednn_conv_backward_images(const conv_shape& s, const conv_input& x, std::uint64_t forward_run, const void* w,
                                 const conv_image_source& dy_image, const conv_image_sink* dx_image, float* dw,
                                 float* db);

} // namespace mixprec::autodiff::detail
