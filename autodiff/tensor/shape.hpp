#pragma once
/// Tensor shapes: up to 8 dimensions, row-major, with NumPy broadcasting.

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <iosfwd>
#include <span>
#include <string>

namespace mixprec::autodiff {

class Shape {
  public:
    static constexpr std::size_t max_rank = 8;
    /// No tensor holds more elements than this (2^40); larger shapes are rejected, not allocated.
    static constexpr std::size_t max_elements = std::size_t{1} << 40;

    Shape() = default; ///< rank 0: a scalar with one element
    Shape(std::initializer_list<std::size_t> dims);
    explicit Shape(std::span<const std::size_t> dims);

    std::size_t rank() const { return rank_; }
    std::size_t operator[](std::size_t axis) const { return dims_[axis]; }
    /// Dimension `axis`, counting from the end when negative (-1 is the last); checked.
    std::size_t dim(int axis) const;
    const std::size_t* begin() const { return dims_.data(); }
    const std::size_t* end() const { return dims_.data() + rank_; }

    /// Product of the dimensions (1 for a scalar).
    std::size_t elements() const { return elements_; }

    /// "(2, 3)", as NumPy prints shapes; "()" for a scalar.
    std::string to_string() const;

    friend bool operator==(const Shape& a, const Shape& b) {
        return a.rank_ == b.rank_ && std::equal(a.begin(), a.end(), b.begin());
    }

  private:
    std::array<std::size_t, max_rank> dims_{};
    std::size_t rank_ = 0;
    std::size_t elements_ = 1;
};

std::ostream& operator<<(std::ostream& os, const Shape& shape); ///< writes shape.to_string()

/// The NumPy broadcast of two shapes; shape_error naming both when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

} // namespace mixprec::autodiff
