#pragma once
// Internal: chunked elementwise loops behind the kernels and op backwards. Each chunk is widened to
// float32, computed, and rounded once to the output dtype; float32 operands and results are read and
// written in place, without the copies. Include only from .cpp files.

#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/grown.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>

#include <algorithm>
#include <array>
#include <span>
#include <vector>

namespace mixprec::autodiff::kernels::detail {

inline constexpr std::size_t chunk = 2048; // floats: a few KiB per operand, stays in L1

/// Calls body(i, n) for the chunks [i, i + n) of [0, size), spread over the threads from 16 chunks each
/// (elementwise work: the same bits however it is split). Each thread runs its chunks in the copy
/// compiled for the level in use (isa_kernels.hpp): a parallel region's body is compiled apart from the
/// function around it, so it would not inherit that function's vector width.
template <class Body>
void for_each_chunk(std::size_t size, Body body) {
    const std::size_t chunks = (size + chunk - 1) / chunk;
    autodiff::detail::split(chunks, 16, [&](std::size_t c0, std::size_t c1) {
        autodiff::detail::vectorized([&] {
            for (std::size_t c = c0; c < c1; ++c) body(c * chunk, std::min(chunk, size - c * chunk));
        });
    });
}

inline const std::byte* bytes_at(const Tensor& t, std::size_t element) {
    return static_cast<const std::byte*>(t.raw()) + element * size_of(t.dtype());
}
inline std::byte* bytes_at(Tensor& t, std::size_t element) {
    return static_cast<std::byte*>(t.raw()) + element * size_of(t.dtype());
}

/// Elements [i, i + n) of `t` as floats: in place for float32, else widened into `scratch` (n floats).
inline const float* floats_at(const Tensor& t, std::size_t i, std::size_t n, std::span<float> scratch) {
    if (t.dtype() == Dtype::float32) return static_cast<const float*>(t.raw()) + i;
    widen(bytes_at(t, i), t.dtype(), scratch.data(), n);
    return scratch.data();
}

/// Where to compute elements [i, i + n) of `out`: in place for float32, else `scratch` (then store()).
inline float* result_at(Tensor& out, std::size_t i, std::array<float, chunk>& scratch) {
    return out.dtype() == Dtype::float32 ? static_cast<float*>(out.raw()) + i : scratch.data();
}
/// As above for n floats, any n: `scratch` grows to n when it must.
inline float* result_at(Tensor& out, std::size_t i, std::size_t n, std::vector<float>& scratch) {
    if (out.dtype() == Dtype::float32) return static_cast<float*>(out.raw()) + i;
    return autodiff::detail::grown(scratch, n);
}
/// Rounds `result` into elements [i, i + n) of `out`, one part of the write `batch` records (rounding.hpp).
inline void store(const float* result, Tensor& out, std::size_t i, std::size_t n, RoundingBatch& batch) {
    if (out.dtype() != Dtype::float32) narrow(result, bytes_at(out, i), n, out.dtype(), batch);
}

/// out[i] = f(x[i]) in x's dtype.
template <class F>
Tensor map(const Tensor& x, F f) {
    Tensor out = Tensor::uninitialized(x.shape(), x.dtype());
    RoundingBatch batch(out);
    for_each_chunk(x.size(), [&](std::size_t i, std::size_t n) {
        std::array<float, chunk> u, r;
        const float* in = floats_at(x, i, n, u);
        float* res = result_at(out, i, r);
        for (std::size_t j = 0; j < n; ++j) res[j] = f(in[j]);
        store(res, out, i, n, batch);
    });
    return out;
}

/// out[i] = f(a[i], b[i]) for same-shape tensors, in `dtype`.
template <class F>
Tensor zip(const Tensor& a, const Tensor& b, Dtype dtype, F f) {
    check_same_shape(a, b, "elementwise");
    Tensor out = Tensor::uninitialized(a.shape(), dtype);
    RoundingBatch batch(out);
    for_each_chunk(a.size(), [&](std::size_t i, std::size_t n) {
        std::array<float, chunk> u, v, r;
        const float* pa = floats_at(a, i, n, u);
        const float* pb = floats_at(b, i, n, v);
        float* res = result_at(out, i, r);
        for (std::size_t j = 0; j < n; ++j) res[j] = f(pa[j], pb[j]);
        store(res, out, i, n, batch);
    });
    return out;
}

/// out[i] = f(a[i], b[i], c[i]) for same-shape tensors, in `dtype`.
template <class F>
Tensor zip3(const Tensor& a, const Tensor& b, const Tensor& c, Dtype dtype, F f) {
    check_same_shape(a, b, "elementwise");
    check_same_shape(a, c, "elementwise");
    Tensor out = Tensor::uninitialized(a.shape(), dtype);
    RoundingBatch batch(out);
    for_each_chunk(a.size(), [&](std::size_t i, std::size_t n) {
        std::array<float, chunk> u, v, w, r;
        const float* pa = floats_at(a, i, n, u);
        const float* pb = floats_at(b, i, n, v);
        const float* pc = floats_at(c, i, n, w);
        float* res = result_at(out, i, r);
        for (std::size_t j = 0; j < n; ++j) res[j] = f(pa[j], pb[j], pc[j]);
        store(res, out, i, n, batch);
    });
    return out;
}

/// Row-major strides of `from` seen as a tensor of shape `to` it broadcasts to (0 along broadcast axes).
inline std::vector<std::size_t> broadcast_strides(const Shape& from, const Shape& to) {
    std::vector<std::size_t> stride(to.rank(), 0);
    const std::size_t lead = to.rank() - from.rank();
    for (std::size_t i = to.rank(), s = 1; i-- > lead;) {
        stride[i] = from[i - lead] == 1 ? 0 : s;
        s *= from[i - lead];
    }
    return stride;
}

/// Calls row(offset_a, offset_b, row_index) for every row (all axes but the last) of `shape`, in
/// row-major order, with the offsets of that row's first element in two broadcast operands.
template <class Row>
void for_each_row(const Shape& shape, const std::vector<std::size_t>& sa, const std::vector<std::size_t>& sb, Row row) {
    const std::size_t rank = shape.rank();
    const std::size_t rows = rank == 0 ? 1 : shape.elements() / std::max<std::size_t>(shape[rank - 1], 1);
    if (rank == 0 || shape.elements() == 0) {
        if (shape.elements() != 0) row(0, 0, 0);
        return;
    }
    std::vector<std::size_t> index(rank, 0);
    std::size_t oa = 0, ob = 0;
    for (std::size_t r = 0; r < rows; ++r) {
        row(oa, ob, r);
        for (std::size_t axis = rank - 1; axis-- > 0;) { // next row: odometer over the outer axes
            oa += sa[axis];
            ob += sb[axis];
            if (++index[axis] < shape[axis]) break;
            oa -= sa[axis] * index[axis];
            ob -= sb[axis] * index[axis];
            index[axis] = 0;
        }
    }
}

/// out = f(a, b) with NumPy broadcasting, in `dtype`: operands widened once, the last axis run as a
/// contiguous (or constant) inner loop so it vectorizes, the result rounded once.
template <class F>
Tensor broadcast_zip(const Tensor& a, const Tensor& b, Dtype dtype, F f) {
    const Shape shape = broadcast_shapes(a.shape(), b.shape());
    const auto sa = broadcast_strides(a.shape(), shape), sb = broadcast_strides(b.shape(), shape);
    const std::vector<float> av = a.to_floats(), bv = b.to_floats();
    std::vector<float> out(shape.elements());
    const std::size_t n = shape.rank() == 0 ? 1 : shape[shape.rank() - 1];
    const std::size_t ia = shape.rank() == 0 ? 0 : sa.back(), ib = shape.rank() == 0 ? 0 : sb.back();
    for_each_row(shape, sa, sb, [&](std::size_t oa, std::size_t ob, std::size_t r) {
        const float* pa = av.data() + oa;
        const float* pb = bv.data() + ob;
        float* po = out.data() + r * n;
        if (ia == 1 && ib == 1)
            for (std::size_t j = 0; j < n; ++j) po[j] = f(pa[j], pb[j]);
        else if (ia == 1)
            for (std::size_t j = 0; j < n; ++j) po[j] = f(pa[j], pb[0]);
        else if (ib == 1)
            for (std::size_t j = 0; j < n; ++j) po[j] = f(pa[0], pb[j]);
        else
            std::fill(po, po + n, f(pa[0], pb[0]));
    });
    return Tensor::from_floats(shape, out, dtype);
}

} // namespace mixprec::autodiff::kernels::detail
