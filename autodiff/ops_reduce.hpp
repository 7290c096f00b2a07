#pragma once
/// Reductions with their gradients. `axes` lists the axes to reduce (negative counts from the end,
/// -1 is the last; each at most once); empty means all of them, which gives a rank-0 result unless
/// `keepdims`, which keeps every reduced axis as a dimension of 1. Sums accumulate in float64 and the
/// result is rounded once to x's dtype (through float32 with round-to-odd, which is exact to round
/// once). Bad or repeated axes throw shape_error naming the axes and the shape.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <vector>

namespace mixprec::autodiff {

/// Σ x over `axes`.  d sum(x)/dx = 1: dy broadcast back to x's shape
Tensor sum(const Tensor& x, std::vector<int> axes = {}, bool keepdims = false);

/// Σ x / n over `axes` (n = elements reduced; NaN when n = 0).  d mean(x)/dx = 1/n: dy/n broadcast back
Tensor mean(const Tensor& x, std::vector<int> axes = {}, bool keepdims = false);

/// Largest x over `axes`; NaN when any reduced element is NaN; shape_error for an empty reduction.
/// d max(x)/dx = [x = max] / (number of elements equal to the max): ties share dy equally.
Tensor max(const Tensor& x, std::vector<int> axes = {}, bool keepdims = false);

/// For each position of the other axes, the index along `axis` (negative counts from the end) of the
/// largest element: for logits (batch, classes), the predicted class of each example. Row-major over x's
/// shape without `axis`, so (2, 3, 4) with axis 1 gives 2 × 4 indices, [i * 4 + k] for x[i, :, k]. Ties give
/// the first index, as NumPy's argmax; a NaN counts as larger than everything, so a slice holding NaN
/// gives the index of its first NaN (x at the index is then max(x), NaN too); -inf is an ordinary value.
/// The indices are integers, exact for any length, and not a Tensor: argmax has no gradient and records
/// nothing on a tape. shape_error naming the axis and the shape for an axis out of range (any axis of a
/// rank-0 tensor) or of length 0.
std::vector<std::int64_t> argmax(const Tensor& x, int axis = -1);

} // namespace mixprec::autodiff
