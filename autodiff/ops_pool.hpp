#pragma once
/// 2-D max and average pooling over NCHW tensors, with their gradients.
///
/// x (N, C, H, W) -> y (N, C, Ho, Wo),  Ho = (H + 2·padding₀ − kernel₀)/stride₀ + 1 (rounded down).
/// A stride of 0 means the kernel size (non-overlapping windows). Padding must not exceed half the
/// kernel (PyTorch's rule), so every window holds at least one element of x. Values are read in float32
/// and each result is rounded once to x's dtype; gradients of overlapping windows are summed in float32
/// and rounded once. shape_error names the shapes for a rank other than 4, a zero kernel, too much
/// padding, or an input smaller than the window.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <array>
#include <cstddef>

namespace mixprec::autodiff {

/// y[n,c,i,j] = max_{p<k₀, q<k₁} x[n, c, i·s₀ − pad₀ + p, j·s₁ − pad₁ + q]   (padding counts as −∞)
/// dx: each dy[n,c,i,j] goes to the argmax of its window; on ties to the first one in row-major window
/// order. A NaN in a window makes y NaN, and the first NaN is the argmax.
Tensor max_pool2d(const Tensor& x, std::array<std::size_t, 2> kernel, std::array<std::size_t, 2> stride = {0, 0},
                  std::array<std::size_t, 2> padding = {0, 0});

/// y[n,c,i,j] = (1/count) Σ x[n, c, i·s₀ − pad₀ + p, j·s₁ − pad₁ + q] over the window's elements inside x:
/// padding is excluded from the count (PyTorch's count_include_pad=false, TensorFlow's "SAME"), so a
/// constant input gives the same constant everywhere, borders included.
/// dx: each dy[n,c,i,j] / count added to every element of x in its window.
Tensor avg_pool2d(const Tensor& x, std::array<std::size_t, 2> kernel, std::array<std::size_t, 2> stride = {0, 0},
                  std::array<std::size_t, 2> padding = {0, 0});

} // namespace mixprec::autodiff
