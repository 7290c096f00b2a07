#include "ops_conv.hpp"

#include "convert.hpp"
#include "matmul_kernels.hpp"
#include "tape.hpp"

#include <algorithm>
#include <array>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::autodiff {
namespace {

/// Column-matrix elements per batch chunk (1 MiB of float32): the columns im2col writes are still in L2
/// when the GEMM reads them, and the column gradient when col2im does.
constexpr std::size_t chunk_elements = std::size_t{1} << 18;

struct geometry {
    std::size_t n, c, h, w, o, kh, kw, ho, wo;
    Conv2dOptions opt;
    std::size_t k() const { return c * kh * kw; } // rows of the column matrix
    std::size_t l() const { return ho * wo; }     // output positions per image
};

std::string pair_text(std::array<std::size_t, 2> a) {
    std::string s = "("; // appends: GCC 12 gives a false -Wrestrict warning on "(" + std::string
    s += std::to_string(a[0]);
    s += ", ";
    s += std::to_string(a[1]);
    return s += ")";
}

geometry check(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Conv2dOptions& o) {
    const std::string xs = "input " + x.shape().to_string(), ws = "weights " + w.shape().to_string();
    if (x.rank() != 4) throw shape_error("conv2d: " + xs + " must have rank 4 (N, C, H, W)");
    if (w.rank() != 4) throw shape_error("conv2d: " + ws + " must have rank 4 (O, C, kh, kw)");
    const Shape& sx = x.shape();
    const Shape& sw = w.shape();
    if (sx[1] != sw[1])
        throw shape_error("conv2d: " + xs + " has " + std::to_string(sx[1]) + " channels but " + ws + " expect " +
                          std::to_string(sw[1]));
    if (bias && (bias->rank() != 1 || bias->shape()[0] != sw[0]))
        throw shape_error("conv2d: bias " + bias->shape().to_string() + " must have shape (" + std::to_string(sw[0]) +
                          ") for " + ws);
    check_same_dtype(x, w, "conv2d");
    if (bias) check_same_dtype(x, *bias, "conv2d bias");
    if (o.stride[0] == 0 || o.stride[1] == 0 || o.dilation[0] == 0 || o.dilation[1] == 0)
        throw shape_error("conv2d: stride " + pair_text(o.stride) + " and dilation " + pair_text(o.dilation) +
                          " must be at least 1 (" + xs + ", " + ws + ")");
    if (sw[2] == 0 || sw[3] == 0) throw shape_error("conv2d: " + ws + " have an empty kernel");
    geometry g{sx[0], sx[1], sx[2], sx[3], sw[0], sw[2], sw[3], 0, 0, o};
    const std::size_t span[2] = {o.dilation[0] * (g.kh - 1) + 1, o.dilation[1] * (g.kw - 1) + 1};
    const std::size_t in[2] = {g.h, g.w};
    std::size_t out[2];
    for (int a = 0; a < 2; ++a) {
        if (in[a] + 2 * o.padding[a] < span[a])
            throw shape_error("conv2d: " + xs + " padded by " + pair_text(o.padding) +
                              " is smaller than the dilated kernel " + pair_text({span[0], span[1]}) + " of " + ws);
        out[a] = (in[a] + 2 * o.padding[a] - span[a]) / o.stride[a] + 1;
    }
    g.ho = out[0];
    g.wo = out[1];
    return g;
}

/// Output positions [lo, hi) along an axis whose input index pos·s + offset − pad lies in [0, in).
std::pair<std::size_t, std::size_t> valid(std::size_t out, std::size_t in, std::size_t s, std::size_t pad,
                                          std::size_t offset) {
    const std::size_t lo = offset >= pad ? 0 : (pad - offset + s - 1) / s;
    const std::size_t hi = in + pad <= offset ? 0 : std::min(out, (in + pad - offset + s - 1) / s);
    return {std::min(lo, hi), hi};
}

/// Walks image b's part of a column matrix (C·kh·kw, nb·Ho·Wo) with rows of `row` elements, one output row
/// i of one kernel tap at a time: visit(col, at, lo, hi) where columns col + j, j in [lo, hi), read the
/// image element at + j·s₁, and the other Wo − (hi − lo) columns are padding (lo = hi = 0: all of them).
template <class Visit>
void for_each_row(const geometry& g, std::size_t row, std::size_t b, Visit visit) {
    const auto& o = g.opt;
    for (std::size_t c = 0; c < g.c; ++c)
        for (std::size_t p = 0; p < g.kh; ++p)
            for (std::size_t q = 0; q < g.kw; ++q) {
                const std::size_t r = (c * g.kh + p) * g.kw + q;
                const auto [ilo, ihi] = valid(g.ho, g.h, o.stride[0], o.padding[0], p * o.dilation[0]);
                const auto [jlo, jhi] = valid(g.wo, g.w, o.stride[1], o.padding[1], q * o.dilation[1]);
                for (std::size_t i = 0; i < g.ho; ++i) {
                    const std::size_t col = r * row + b * g.l() + i * g.wo;
                    if (i < ilo || i >= ihi) {
                        visit(col, 0, 0, 0);
                        continue;
                    }
                    // `at` may wrap below 0, but at + j·s₁ is exact for j ≥ jlo (unsigned arithmetic is modular)
                    visit(col,
                          (c * g.h + i * o.stride[0] + p * o.dilation[0] - o.padding[0]) * g.w + q * o.dilation[1] -
                              o.padding[1],
                          jlo, jhi);
                }
            }
}

/// Image b of the chunk into its columns of cols (zeros for padding), copying elements exactly.
template <class T>
void im2col(const geometry& g, const T* image, std::size_t row, std::size_t b, T* cols) {
    const std::size_t s = g.opt.stride[1];
    for_each_row(g, row, b, [&](std::size_t col, std::size_t at, std::size_t lo, std::size_t hi) {
        T* dst = cols + col;
        std::fill(dst, dst + lo, T{});
        for (std::size_t j = lo; j < hi; ++j) dst[j] = image[at + j * s]; // short rows: no memmove call
        std::fill(dst + hi, dst + g.wo, T{});
    });
}

/// dx (one image) += its columns of the column gradient, at the positions they were read from.
void col2im(const geometry& g, const float* cols, std::size_t row, std::size_t b, float* dx) {
    const std::size_t s = g.opt.stride[1];
    for_each_row(g, row, b, [&](std::size_t col, std::size_t at, std::size_t lo, std::size_t hi) {
        const float* src = cols + col;
        for (std::size_t j = lo; j < hi; ++j) dx[at + j * s] += src[j];
    });
}

/// c = op(a) op(b) in float32: float operands in OpenBLAS sgemm, bfloat16 ones in oneDNN (exact products,
/// float32 accumulation).
template <class T>
void gemm(std::size_t m, std::size_t n, std::size_t k, bool ta, bool tb, const T* a, const T* b, float* c) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        std::fill_n(c, m * n, 0.0f);
        return;
    }
    const detail::gemm_shape s{1, m, n, k, ta, tb, false};
    if constexpr (std::is_same_v<T, float>) {
        detail::sgemm(s, a, b, c);
    } else {
        detail::onednn_matmul_bf16(s, a, b, c);
    }
}

/// Per-thread scratch reused across calls (large fresh allocations cost a page fault per 4 KiB). Slots
/// 0-3 hold the work buffers of forward/backward, 4-6 widened inputs, 7 one image's float32 result.
enum slot : std::size_t { widened_x = 4, widened_w = 5, widened_other = 6, image_result = 7 };

template <class T>
T* scratch(std::size_t slot, std::size_t n) {
    thread_local std::array<std::vector<T>, 8> pool;
    if (pool[slot].size() < n) pool[slot].resize(n);
    return pool[slot].data();
}

/// t as float32: its own storage when float32, else widened into scratch `slot`.
const float* floats_of(const Tensor& t, std::size_t slot) {
    if (t.dtype() == Dtype::float32) return static_cast<const float*>(t.raw());
    float* out = scratch<float>(slot, t.size());
    widen(t.raw(), t.dtype(), out, t.size());
    return out;
}

/// A zeroed float32 accumulator for a result of shape and dtype; finish() rounds it once.
struct float_result {
    Tensor tensor;
    std::vector<float> wide;
    float* data;
    float_result(const Shape& shape, Dtype dtype) : tensor(shape, dtype) {
        if (dtype == Dtype::float32) {
            data = static_cast<float*>(tensor.raw());
        } else {
            wide.assign(tensor.size(), 0.0f);
            data = wide.data();
        }
    }
    Tensor finish() {
        if (tensor.dtype() != Dtype::float32) narrow(data, tensor.raw(), tensor.size(), tensor.dtype());
        return tensor;
    }
};

/// Float32 values for elements [at, at + n) of t: its own storage for float32, else zeros in this
/// thread's scratch, which commit() rounds into t once.
float* workspace(Tensor& t, std::size_t at, std::size_t n) {
    if (t.dtype() == Dtype::float32) return static_cast<float*>(t.raw()) + at;
    float* v = scratch<float>(image_result, n);
    std::fill_n(v, n, 0.0f);
    return v;
}

void commit(Tensor& t, std::size_t at, const float* v, std::size_t n) {
    if (t.dtype() != Dtype::float32) narrow(v, static_cast<std::byte*>(t.raw()) + at * size_of(t.dtype()), n, t.dtype());
}

/// Images per chunk, balanced so every chunk has about the same size.
std::size_t chunk_size(const geometry& g) {
    const std::size_t most = std::clamp(chunk_elements / std::max<std::size_t>(1, g.k() * g.l()), std::size_t{1},
                                        std::max<std::size_t>(g.n, 1));
    const std::size_t chunks = (g.n + most - 1) / most;
    return chunks == 0 ? most : (g.n + chunks - 1) / chunks;
}

// The data movement runs on OpenMP threads next to oneDNN (which uses them too), but serially next to
// OpenBLAS: its own spinning threads and OpenMP's would fight over the cores.
template <class T>
constexpr bool parallel = !std::is_same_v<T, float>;

template <class T>
void forward(const geometry& g, const T* x, const T* w, const float* bias, Tensor& y) {
    const std::size_t k = g.k(), l = g.l(), most = chunk_size(g), image = g.c * g.h * g.w;
    T* cols = scratch<T>(0, k * most * l);
    float* prod = scratch<float>(1, g.o * most * l);
    for (std::size_t n0 = 0; n0 < g.n; n0 += most) {
        const std::size_t nb = std::min(most, g.n - n0), row = nb * l;
#pragma omp parallel for schedule(static) if (parallel<T>)
        for (std::size_t b = 0; b < nb; ++b) im2col(g, x + (n0 + b) * image, row, b, cols);
        gemm(g.o, row, k, false, false, w, cols, prod); // (O, nb·L) = w · cols
#pragma omp parallel for schedule(static) if (parallel<T>)
        for (std::size_t b = 0; b < nb; ++b) { // y[n0 + b] = prod[:, b·L : (b+1)·L] + bias, rounded once
            float* dst = workspace(y, (n0 + b) * g.o * l, g.o * l);
            for (std::size_t o = 0; o < g.o; ++o) {
                const float* src = prod + o * row + b * l;
                const float add = bias ? bias[o] : 0.0f;
                for (std::size_t i = 0; i < l; ++i) dst[o * l + i] = src[i] + add;
            }
            commit(y, (n0 + b) * g.o * l, dst, g.o * l);
        }
    }
}

struct conv_grads {
    Tensor& dx;      // (N, C, H, W)
    float *dw, *db;  // (O, C·kh·kw), (O) or null
};

template <class T>
void backward(const geometry& g, const T* x, const T* w, const T* dy, conv_grads d) {
    const std::size_t k = g.k(), l = g.l(), most = chunk_size(g), image = g.c * g.h * g.w;
    if (d.db)
        for (std::size_t n = 0; n < g.n; ++n)
            for (std::size_t o = 0; o < g.o; ++o) {
                float s = 0;
                for (std::size_t i = 0; i < l; ++i) s += static_cast<float>(dy[(n * g.o + o) * l + i]);
                d.db[o] += s;
            }
    T* cols = scratch<T>(0, k * most * l);
    T* dyp = scratch<T>(1, g.o * most * l);
    float* dcols = scratch<float>(2, k * most * l);
    float* dw_chunk = scratch<float>(3, g.o * k);
    for (std::size_t n0 = 0; n0 < g.n; n0 += most) {
        const std::size_t nb = std::min(most, g.n - n0), row = nb * l;
#pragma omp parallel for schedule(static) if (parallel<T>)
        for (std::size_t b = 0; b < nb; ++b) {
            for (std::size_t o = 0; o < g.o; ++o) // dY as (O, nb·L)
                std::copy_n(dy + ((n0 + b) * g.o + o) * l, l, dyp + o * row + b * l);
            im2col(g, x + (n0 + b) * image, row, b, cols);
        }
        gemm(g.o, k, row, false, true, dyp, cols, n0 == 0 ? d.dw : dw_chunk); // dY · colsᵀ
        if (n0 != 0)
            for (std::size_t i = 0; i < g.o * k; ++i) d.dw[i] += dw_chunk[i];
        gemm(k, row, g.o, true, false, w, dyp, dcols); // wᵀ · dY
#pragma omp parallel for schedule(static) if (parallel<T>)
        for (std::size_t b = 0; b < nb; ++b) {
            float* dx = workspace(d.dx, (n0 + b) * image, image);
            col2im(g, dcols, row, b, dx);
            commit(d.dx, (n0 + b) * image, dx, image);
        }
    }
}

} // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, Conv2dOptions options) {
    const geometry g = check(x, w, bias, options);
    const bool bf16 = x.dtype() == Dtype::bfloat16 && detail::onednn_bf16_available();
    Tensor y(Shape{g.n, g.o, g.ho, g.wo}, x.dtype());
    const float* b = bias ? floats_of(*bias, widened_other) : nullptr;
    if (bf16) {
        forward(g, x.data<bfloat16>().data(), w.data<bfloat16>().data(), b, y);
    } else {
        forward(g, floats_of(x, widened_x), floats_of(w, widened_w), b, y);
    }
    const auto grads = [x, w, has_bias = bias.has_value(), g, bf16](const Tensor& dy) {
        Tensor dx(x.shape(), x.dtype());
        float_result dw(w.shape(), w.dtype());
        std::optional<float_result> db;
        if (has_bias) db.emplace(Shape{g.o}, w.dtype());
        const conv_grads d{dx, dw.data, db ? db->data : nullptr};
        if (bf16) {
            backward(g, x.data<bfloat16>().data(), w.data<bfloat16>().data(), dy.data<bfloat16>().data(), d);
        } else {
            backward(g, floats_of(x, widened_x), floats_of(w, widened_w), floats_of(dy, widened_other), d);
        }
        Gradients result{dx, dw.finish()};
        if (db) result.push_back(db->finish());
        return result;
    };
    if (bias) {
        if (should_record({&x, &w, &*bias})) record(y, {&x, &w, &*bias}, grads);
    } else if (should_record({&x, &w})) {
        record(y, {&x, &w}, grads);
    }
    return y;
}

} // namespace mixprec::autodiff
