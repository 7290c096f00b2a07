#include <mixprec/autodiff/tensor/shape.hpp>

#include <mixprec/autodiff/tensor/errors.hpp>

#include <algorithm>
#include <ostream>

namespace mixprec::autodiff {

Shape::Shape(std::initializer_list<std::size_t> dims)
    : Shape(std::span<const std::size_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::size_t> dims) {
    if (dims.size() > max_rank)
        throw shape_error("shape of rank " + std::to_string(dims.size()) + " exceeds the maximum rank " +
                          std::to_string(max_rank));
    rank_ = dims.size();
    std::copy(dims.begin(), dims.end(), dims_.begin());
    for (std::size_t d : dims) {
        if (d != 0 && elements_ > max_elements / d)
            throw shape_error("shape " + to_string() + " has more than 2^40 elements");
        elements_ *= d;
    }
}

std::size_t Shape::dim(int axis) const {
    const long r = static_cast<long>(rank_);
    const long a = axis < 0 ? axis + r : axis;
    if (a < 0 || a >= r)
        throw shape_error("axis " + std::to_string(axis) + " is out of range for shape " + to_string());
    return dims_[static_cast<std::size_t>(a)];
}

std::string Shape::to_string() const {
    std::string s = "(";
    for (std::size_t i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape.to_string(); }

Shape broadcast_shapes(const Shape& a, const Shape& b) {
    const std::size_t rank = std::max(a.rank(), b.rank());
    std::array<std::size_t, Shape::max_rank> out{};
    for (std::size_t i = 0; i < rank; ++i) { // i counts from the last axis
        const std::size_t da = i < a.rank() ? a[a.rank() - 1 - i] : 1;
        const std::size_t db = i < b.rank() ? b[b.rank() - 1 - i] : 1;
        if (da != db && da != 1 && db != 1)
            throw shape_error("shapes " + a.to_string() + " and " + b.to_string() + " cannot be broadcast together");
        out[rank - 1 - i] = da == 1 ? db : da;
    }
    return Shape(std::span<const std::size_t>(out.data(), rank));
}

} // namespace mixprec::autodiff
