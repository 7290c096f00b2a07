#include <mixprec/autodiff/ops_shape.hpp>

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/kernels_elementwise.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <span>
#include <string>

namespace mixprec::autodiff {
namespace {

using Strides = std::array<std::size_t, Shape::max_rank>;

std::size_t axis_index(int axis, const Shape& shape, const char* op) {
    const long r = static_cast<long>(shape.rank());
    const long a = axis < 0 ? axis + r : axis;
    if (a < 0 || a >= r)
        throw shape_error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for shape " +
                          shape.to_string());
    return static_cast<std::size_t>(a);
}

Strides row_major_strides(const Shape& shape) {
    Strides s{};
    for (std::size_t i = shape.rank(), step = 1; i-- > 0;) {
        s[i] = step;
        step *= shape[i];
    }
    return s;
}

/// Elements before and after `axis` (product of the dimensions on each side).
std::pair<std::size_t, std::size_t> outer_inner(const Shape& shape, std::size_t axis) {
    std::size_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < axis; ++i) outer *= shape[i];
    for (std::size_t i = axis + 1; i < shape.rank(); ++i) inner *= shape[i];
    return {outer, inner};
}

/// Rows [row0, row1) of out (of `shape`; a row is its last axis) = x's elements read at offsets
/// Σ index[k] stride[k], copied as S-byte words (a whole row at once where the last axis is contiguous).
template <std::size_t S>
void gather_rows(const std::byte* src, std::byte* dst, const Shape& shape, const Strides& stride, std::size_t row0,
                 std::size_t row1) {
    const std::size_t last = shape.rank() - 1, len = shape[last], step = stride[last];
    Strides index{};
    std::size_t offset = 0;
    for (std::size_t a = last, rest = row0; a-- > 0;) { // row0's index, odometer style
        index[a] = rest % shape[a];
        rest /= shape[a];
        offset += index[a] * stride[a];
    }
    dst += row0 * len * S;
    for (std::size_t row = row0; row < row1; ++row) {
        if (step == 1) {
            std::memcpy(dst, src + offset * S, len * S);
            dst += len * S;
        } else {
            for (std::size_t j = 0; j < len; ++j, dst += S) std::memcpy(dst, src + (offset + j * step) * S, S);
        }
        for (std::size_t a = last; a-- > 0;) { // next row
            offset += stride[a];
            if (++index[a] < shape[a]) break;
            offset -= stride[a] * index[a];
            index[a] = 0;
        }
    }
}

/// out (of `shape`) = x's elements read at offsets Σ index[k] stride[k]: rows spread over the threads.
template <std::size_t S>
void gather_words(const std::byte* src, std::byte* dst, const Shape& shape, const Strides& stride) {
    const std::size_t n = shape.elements();
    if (n == 0) return;
    if (shape.rank() == 0) {
        std::memcpy(dst, src, S);
        return;
    }
    const std::size_t len = shape[shape.rank() - 1];
    detail::split(n / len, std::max<std::size_t>(1, (std::size_t{1} << 14) / len),
                  [&](std::size_t r0, std::size_t r1) { gather_rows<S>(src, dst, shape, stride, r0, r1); });
}

Tensor gather(const Tensor& x, const Shape& shape, const Strides& stride) {
    Tensor out = Tensor::uninitialized(shape, x.dtype()); // every element is written below
    const auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(out.raw());
    switch (size_of(x.dtype())) {
    case 1:
        gather_words<1>(src, dst, shape, stride);
        break;
    case 2:
        gather_words<2>(src, dst, shape, stride);
        break;
    default:
        gather_words<4>(src, dst, shape, stride);
        break;
    }
    return out;
}

Tensor permute(const Tensor& x, const std::vector<std::size_t>& permutation) {
    const Strides in = row_major_strides(x.shape());
    Strides stride{};
    std::array<std::size_t, Shape::max_rank> dims{};
    for (std::size_t k = 0; k < permutation.size(); ++k) {
        dims[k] = x.shape()[permutation[k]];
        stride[k] = in[permutation[k]];
    }
    return gather(x, Shape(std::span<const std::size_t>(dims.data(), permutation.size())), stride);
}

/// For each of `rows` rows: copies `bytes` from src + row·src_pitch + src_at to dst + row·dst_pitch + dst_at.
void copy_rows(const Tensor& src, std::size_t src_pitch, std::size_t src_at, Tensor& dst, std::size_t dst_pitch,
               std::size_t dst_at, std::size_t rows, std::size_t bytes) {
    if (bytes == 0) return;
    const auto* s = static_cast<const std::byte*>(src.raw()) + src_at;
    auto* d = static_cast<std::byte*>(dst.raw()) + dst_at;
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(d + r * dst_pitch, s + r * src_pitch, bytes);
}

/// x[..., begin:end, ...] along a validated axis.
Tensor slice_copy(const Tensor& x, std::size_t axis, std::size_t begin, std::size_t end) {
    std::array<std::size_t, Shape::max_rank> dims{};
    std::copy(x.shape().begin(), x.shape().end(), dims.begin());
    dims[axis] = end - begin;
    Tensor out = Tensor::uninitialized(Shape(std::span<const std::size_t>(dims.data(), x.rank())), x.dtype());
    const auto [outer, inner] = outer_inner(x.shape(), axis);
    const std::size_t row = inner * size_of(x.dtype());
    copy_rows(x, x.shape()[axis] * row, begin * row, out, (end - begin) * row, 0, outer, (end - begin) * row);
    return out;
}

std::string shape_list(const std::vector<Tensor>& xs) {
    std::string s;
    for (const Tensor& x : xs) s += (s.empty() ? "" : ", ") + x.shape().to_string();
    return s;
}

} // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
    Tensor y = x.reshape(shape);
    if (should_record({&x}))
        record(y, {&x}, [from = x.shape()](const Tensor& dy) { return Gradients{dy.reshape(from)}; });
    return y;
}

Tensor transpose(const Tensor& x, std::vector<std::size_t> permutation) {
    const std::size_t rank = x.rank();
    if (permutation.empty() && rank > 0) {
        permutation.resize(rank);
        std::iota(permutation.rbegin(), permutation.rend(), std::size_t{0});
    }
    std::vector<std::size_t> inverse(rank, rank);
    bool valid = permutation.size() == rank;
    for (std::size_t k = 0; valid && k < rank; ++k) {
        valid = permutation[k] < rank && inverse[permutation[k]] == rank;
        if (valid) inverse[permutation[k]] = k;
    }
    if (!valid) {
        std::string p;
        for (std::size_t a : permutation) p += (p.empty() ? "" : ", ") + std::to_string(a);
        throw shape_error("transpose: (" + p + ") is not a permutation of the axes of shape " + x.shape().to_string());
    }
    Tensor y = permute(x, permutation);
    if (should_record({&x})) record(y, {&x}, [inverse](const Tensor& dy) { return Gradients{permute(dy, inverse)}; });
    return y;
}

Tensor slice(const Tensor& x, int axis, std::size_t begin, std::size_t end) {
    const std::size_t a = axis_index(axis, x.shape(), "slice");
    if (begin > end || end > x.shape()[a])
        throw shape_error("slice: [" + std::to_string(begin) + ", " + std::to_string(end) +
                          ") is out of range for axis " + std::to_string(axis) + " (of size " +
                          std::to_string(x.shape()[a]) + ") of shape " + x.shape().to_string());
    Tensor y = slice_copy(x, a, begin, end);
    if (should_record({&x}))
        record(y, {&x}, [from = x.shape(), a, begin, end](const Tensor& dy) {
            Tensor dx(from, dy.dtype()); // zeros outside the slice
            const auto [outer, inner] = outer_inner(from, a);
            const std::size_t row = inner * size_of(dy.dtype());
            copy_rows(dy, (end - begin) * row, 0, dx, from[a] * row, begin * row, outer, (end - begin) * row);
            return Gradients{dx};
        });
    return y;
}

Tensor concat(const std::vector<Tensor>& xs, int axis) {
    if (xs.empty()) throw shape_error("concat: no tensors to join");
    const Shape& first = xs.front().shape();
    const std::size_t a = axis_index(axis, first, "concat");
    std::array<std::size_t, Shape::max_rank> dims{};
    std::copy(first.begin(), first.end(), dims.begin());
    dims[a] = 0;
    for (const Tensor& x : xs) {
        check_same_dtype(xs.front(), x, "concat");
        bool same = x.rank() == first.rank();
        for (std::size_t i = 0; same && i < first.rank(); ++i) same = i == a || x.shape()[i] == first[i];
        if (!same)
            throw shape_error("concat: shapes " + shape_list(xs) + " differ outside axis " + std::to_string(axis));
        dims[a] += x.shape()[a];
    }
    Tensor y(Shape(std::span<const std::size_t>(dims.data(), first.rank())), xs.front().dtype());
    const auto [outer, inner] = outer_inner(first, a);
    const std::size_t row = inner * size_of(y.dtype());
    std::vector<std::size_t> offsets; // where each input starts along the axis
    for (std::size_t at = 0; const Tensor& x : xs) {
        offsets.push_back(at);
        copy_rows(x, x.shape()[a] * row, 0, y, dims[a] * row, at * row, outer, x.shape()[a] * row);
        at += x.shape()[a];
    }
    std::vector<const Tensor*> inputs;
    for (const Tensor& x : xs) inputs.push_back(&x);
    if (should_record(inputs))
        record(y, inputs, [a, offsets, total = dims[a]](const Tensor& dy) {
            Gradients g;
            for (std::size_t k = 0; k < offsets.size(); ++k)
                g.emplace_back(slice_copy(dy, a, offsets[k], k + 1 < offsets.size() ? offsets[k + 1] : total));
            return g;
        });
    return y;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
    const std::size_t rank = shape.rank();
    bool valid = x.rank() <= rank;
    const std::size_t lead = valid ? rank - x.rank() : 0;
    for (std::size_t i = 0; valid && i < x.rank(); ++i) valid = x.shape()[i] == 1 || x.shape()[i] == shape[lead + i];
    if (!valid)
        throw shape_error("broadcast_to: cannot broadcast shape " + x.shape().to_string() + " to " + shape.to_string());
    const Strides in = row_major_strides(x.shape());
    Strides stride{}; // 0 on new and stretched axes
    for (std::size_t i = 0; i < x.rank(); ++i) stride[lead + i] = x.shape()[i] == 1 ? 0 : in[i];
    Tensor y = gather(x, shape, stride);
    if (should_record({&x}))
        record(y, {&x}, [from = x.shape()](const Tensor& dy) { return Gradients{kernels::sum_to_shape(dy, from)}; });
    return y;
}

} // namespace mixprec::autodiff
