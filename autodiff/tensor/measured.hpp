#pragma once
/// What the measured modes chose in this process: ConvBackend::measured (ops_conv.hpp) for each
/// convolution pass and shape, Float32Gemm::measured (kernels_matmul.hpp) for each product's shape. Each
/// choice is made once, at the first use of its shape, by timing every candidate, and kept after.

#include <string>
#include <vector>

namespace mixprec::autodiff {

/// A line per choice, in the order made: what was chosen for, the winner, and each candidate's best time,
/// e.g. "conv2d forward x (128, 32, 13, 13) w (64, 32, 3, 3) float32 stride (1, 1) padding (0, 0)
/// dilation (1, 1): im2col_onednn, best of 3: im2col 4.79 ms, im2col_onednn 4.18 ms, onednn 4.52 ms".
std::vector<std::string> measured_choices();

} // namespace mixprec::autodiff
