#pragma once
/// MX block rounding of whole tensors: each value replaced by the float32 value its MXFP8 encoding decodes
/// to (mx.hpp), with the blocks of 32 along the axis a product sums over. A product of such tensors, summed
/// in float32, is a product of MX operands (autodiff::dense_mxfp8): the decoded values are exact in
/// float32, and so are the products of two of them.

#include <mixprec/autodiff/tensor/tensor.hpp>

namespace mixprec::autodiff::kernels {

/// x (..., n) of any dtype, rounded in MX blocks along its last axis (each row's last block holds what
/// remains of n). float32, x's shape. `element` is float8_e4m3 or float8_e5m2, else std::invalid_argument.
Tensor mx_round(const Tensor& x, Dtype element);

/// x (rows, cols) of any dtype, rounded in MX blocks down its columns (32 consecutive rows of a column;
/// each column's last block holds what remains of rows). float32, x's shape. For a product that sums over
/// x's first axis: a weight gradient xᵀ dy, or x @ w with w's blocks along `in`. shape_error unless x
/// has rank 2.
Tensor mx_round_columns(const Tensor& x, Dtype element);

} // namespace mixprec::autodiff::kernels
