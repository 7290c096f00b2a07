#pragma once
/// Reductions with their gradients. `axes` lists the axes to reduce (negative counts from the end,
/// -1 is the last; each at most once); empty means all of them, which gives a rank-0 result unless
/// `keepdims`, which keeps every reduced axis as a dimension of 1. Sums accumulate in float64 and the
/// result is rounded once to x's dtype (through float32 with round-to-odd, which is exact to round
/// once). Bad or repeated axes throw shape_error naming the axes and the shape.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <vector>

namespace mixprec::autodiff {

/// Σ x over `axes`.  d sum(x)/dx = 1: dy broadcast back to x's shape
Tensor sum(const Tensor& x, std::vector<int> axes = {}, bool keepdims = false);

/// Σ x / n over `axes` (n = elements reduced; NaN when n = 0).  d mean(x)/dx = 1/n: dy/n broadcast back
Tensor mean(const Tensor& x, std::vector<int> axes = {}, bool keepdims = false);

/// Largest x over `axes`; NaN when any reduced element is NaN; shape_error for an empty reduction.
/// d max(x)/dx = [x = max] / (number of elements equal to the max): ties share dy equally.
Tensor max(const Tensor& x, std::vector<int> axes = {}, bool keepdims = false);

} // namespace mixprec::autodiff
