#pragma once
/// Shape ops with their gradients: pure data movement, so every value (and every gradient) is copied
/// bit for bit in the input's dtype, never rounded. Axes count from the end when negative (-1 is the
/// last). Shape mistakes throw shape_error naming the shapes and axes involved.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstddef>
#include <vector>

namespace mixprec::autodiff {

/// The same elements seen with another shape of the same element count (shares x's storage, has its
/// own identity).  d reshape(x)/dx: dy reshaped back to x's shape
Tensor reshape(const Tensor& x, const Shape& shape);

/// Axes permuted as np.transpose does: axis k of y is axis permutation[k] of x; an empty permutation
/// reverses the axes.  d transpose(x, p)/dx: dy transposed by the inverse permutation p⁻¹
Tensor transpose(const Tensor& x, std::vector<std::size_t> permutation = {});

/// The elements with index in [begin, end) along `axis` (begin ≤ end ≤ that dimension).
/// d slice(x)/dx: dy scattered into zeros of x's shape at [begin, end)
Tensor slice(const Tensor& x, int axis, std::size_t begin, std::size_t end);

/// xs joined along `axis`: equal ranks, equal dtypes (dtype_error otherwise) and equal dimensions
/// outside `axis`.  d concat(xs)/dxₖ: the slice of dy that xₖ filled
Tensor concat(const std::vector<Tensor>& xs, int axis);

/// x repeated to `shape` by NumPy's rules (leading axes added, dimensions of 1 stretched).
/// d broadcast_to(x)/dx: dy summed over the broadcast axes (kernels::sum_to_shape, float32 sums)
Tensor broadcast_to(const Tensor& x, const Shape& shape);

} // namespace mixprec::autodiff
