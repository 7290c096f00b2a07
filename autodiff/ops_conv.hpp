#pragma once
/// 2-D convolution (cross-correlation, as in every deep-learning library) with its gradient.
///
/// Layout NCHW, weights (O, C, kh, kw). For bfloat16 on CPUs with AVX512-BF16, oneDNN's convolution
/// primitives run on the bfloat16 values themselves (exact products, float32 accumulation, float32
/// results). Every other case is one GEMM on an im2col matrix per chunk of the batch: OpenBLAS sgemm on
/// operands widened to float32. Either way the product comes out in float32, the bias is added in
/// float32, and the result is rounded once (by mixprec, never by oneDNN) to the inputs' dtype. The backward pass likewise: dx (overlapping patches included), dw and dbias are each
/// summed in float32 and rounded once. Chunks keep the column matrix at about 1 MiB.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <optional>

namespace mixprec::autodiff {

struct Conv2dOptions {
    std::array<std::size_t, 2> stride{1, 1};   ///< (rows, columns), each ≥ 1
    std::array<std::size_t, 2> padding{0, 0};  ///< zeros added on both sides of each spatial axis
    std::array<std::size_t, 2> dilation{1, 1}; ///< spacing of the kernel taps, each ≥ 1
};

/// y[n,o,i,j] = b[o] + Σ_{c,p,q} w[o,c,p,q] · x[n, c, i·s₀ − p₀ + p·d₀, j·s₁ − p₁ + q·d₁]  (zero outside x)
///   x (N, C, H, W), w (O, C, kh, kw), bias (O) -> y (N, O, Ho, Wo),  Ho = (H + 2p₀ − d₀(kh−1) − 1)/s₀ + 1
/// With cols = im2col(x) (C·kh·kw, N·Ho·Wo) and dY as (O, N·Ho·Wo):
///   y = w·cols + b,  dw = dY·colsᵀ,  dx = col2im(wᵀ·dY) (overlaps summed),  dbias = Σ_{n,i,j} dY
/// shape_error naming the shapes for wrong ranks, mismatched channels or bias, stride or dilation 0,
/// or an input smaller than the dilated kernel; dtype_error unless x, w and bias share a dtype.
Tensor conv2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt,
              Conv2dOptions options = {});

} // namespace mixprec::autodiff
