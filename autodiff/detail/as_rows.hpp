#pragma once
// Internal: a tensor of rank 3 or more seen as the matrix of its rows, for products over every leading axis
// at once (a dense layer's weight gradient).

#include <mixprec/autodiff/tensor/tensor.hpp>

namespace mixprec::autodiff::detail {

/// t (..., n) seen as a matrix (rows, n), sharing its storage.
inline Tensor as_rows(const Tensor& t) {
    if (t.rank() <= 2) return t;
    std::size_t rows = 1;
    for (std::size_t i = 0; i + 1 < t.rank(); ++i) rows *= t.shape()[i];
    return t.reshape(Shape{rows, t.shape()[t.rank() - 1]});
}

} // namespace mixprec::autodiff::detail
