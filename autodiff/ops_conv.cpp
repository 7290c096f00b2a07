#include <mixprec/autodiff/ops_conv.hpp>

#include <mixprec/autodiff/detail/fp8_cast.hpp>
#include <mixprec/autodiff/detail/pool_2x2.hpp>
#include <mixprec/autodiff/detail/pooled_weights.hpp>
#include <mixprec/autodiff/ops_pool.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/conv_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/fastest.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>
#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mixprec::autodiff {
namespace {

/// Column-matrix elements per chunk of a thread's images (1 MiB of float32): the columns im2col writes
/// are still in that core's L2 when the GEMM reads them, and the column gradient when col2im does.
constexpr std::size_t chunk_elements = std::size_t{1} << 18;

struct geometry {
    std::size_t n, c, h, w, o, kh, kw, ho, wo;
    Conv2dOptions opt;
    std::size_t k() const { return c * kh * kw; } // rows of the column matrix
    std::size_t l() const { return ho * wo; }     // output positions per image
};

/// "(a, b)", as shapes print.
std::string pair_text(std::array<std::size_t, 2> a) { return Shape{a[0], a[1]}.to_string(); }

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

/// One kernel tap's row of a column matrix, for one image: output rows i in [ilo, ihi) and columns j in
/// [jlo, jhi) read image element at + i·step + j·s₁ into column col + i·Wo + j; the rest are padding.
struct tap {
    std::size_t col, at, step, ilo, ihi, jlo, jhi;
};

/// Walks image b's part of a column matrix (C·kh·kw, nb·Ho·Wo) with rows of `row` elements, one kernel
/// tap (c, p, q) at a time. The valid output ranges depend on p and q only, so they are found once per
/// call rather than for every channel (their divisions were 3% of im2col's instructions).
template <class Visit>
void for_each_tap(const geometry& g, std::size_t row, std::size_t b, Visit visit) {
    const auto& o = g.opt;
    std::vector<std::pair<std::size_t, std::size_t>> rows(g.kh), cols(g.kw);
    for (std::size_t p = 0; p < g.kh; ++p) rows[p] = valid(g.ho, g.h, o.stride[0], o.padding[0], p * o.dilation[0]);
    for (std::size_t q = 0; q < g.kw; ++q) cols[q] = valid(g.wo, g.w, o.stride[1], o.padding[1], q * o.dilation[1]);
    for (std::size_t c = 0; c < g.c; ++c)
        for (std::size_t p = 0; p < g.kh; ++p) {
            const auto [ilo, ihi] = rows[p];
            for (std::size_t q = 0; q < g.kw; ++q) {
                const std::size_t r = (c * g.kh + p) * g.kw + q;
                const auto [jlo, jhi] = cols[q];
                // `at` may wrap below 0, but at + i·step + j·s₁ is exact inside the valid ranges (unsigned
                // arithmetic is modular)
                const std::size_t at =
                    (c * g.h + p * o.dilation[0] - o.padding[0]) * g.w + q * o.dilation[1] - o.padding[1];
                visit(tap{r * row + b * g.l(), at, o.stride[0] * g.w, ilo, ihi, jlo, jhi});
            }
        }
}

/// dst[0, n) = src[0, n) for the short runs of im2col: moves of v bytes, the last one overlapping the one
/// before (a memcpy call, or an element loop, costs more).
template <std::size_t v>
[[gnu::always_inline]] inline void copy_in_moves(const std::byte* from, std::byte* to, std::size_t bytes) {
    for (std::size_t i = 0; i + v < bytes; i += v) std::memcpy(to + i, from + i, v);
    std::memcpy(to + bytes - v, from + bytes - v, v);
}
/// 32-byte moves (one vector at the AVX2 and AVX-512 levels, where im2col runs with detail::vectorized:
/// 16% fewer samples in im2col than 16-byte ones for the cnn's 11-element rows), 16-byte ones below 32
/// bytes.
template <class T>
[[gnu::always_inline]] inline void copy_short(const T* src, T* dst, std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    const auto* from = reinterpret_cast<const std::byte*>(src);
    auto* to = reinterpret_cast<std::byte*>(dst);
    if (bytes >= 32) {
        copy_in_moves<32>(from, to, bytes);
    } else if (bytes >= 16) {
        copy_in_moves<16>(from, to, bytes);
    } else {
        std::copy_n(src, n, dst);
    }
}

/// Image b of the chunk into its columns of cols (zeros for padding), copying elements exactly.
template <class T>
void im2col(const geometry& g, const T* image, std::size_t row, std::size_t b, T* cols) {
    const std::size_t s = g.opt.stride[1], wo = g.wo;
    for_each_tap(g, row, b, [&](const tap& t) {
        T* dst = cols + t.col;
        std::fill(dst, dst + t.ilo * wo, T{});
        for (std::size_t i = t.ilo; i < t.ihi; ++i) {
            T* d = dst + i * wo;
            const T* src = image + (t.at + i * t.step);
            if (t.jlo > 0) std::fill(d, d + t.jlo, T{});
            if (s == 1) {
                copy_short(src + t.jlo, d + t.jlo, t.jhi - t.jlo);
            } else {
                for (std::size_t j = t.jlo; j < t.jhi; ++j) d[j] = src[j * s];
            }
            if (t.jhi < wo) std::fill(d + t.jhi, d + wo, T{});
        }
        std::fill(dst + t.ihi * wo, dst + g.ho * wo, T{});
    });
}

/// dx (one image) += its columns of the column gradient, at the positions they were read from.
void col2im(const geometry& g, const float* cols, std::size_t row, std::size_t b, float* dx) {
    const std::size_t s = g.opt.stride[1], wo = g.wo;
    for_each_tap(g, row, b, [&](const tap& t) {
        for (std::size_t i = t.ilo; i < t.ihi; ++i) {
            const float* __restrict src = cols + t.col + i * wo; // no overlap: no run-time alias check
            float* __restrict d = dx + (t.at + i * t.step);
            if (s == 1) {
                for (std::size_t j = t.jlo; j < t.jhi; ++j) d[j] += src[j];
            } else {
                for (std::size_t j = t.jlo; j < t.jhi; ++j) d[j * s] += src[j];
            }
        }
    });
}

/// c = op(a) op(b) in float32: float operands in OpenBLAS's sgemm (oneDNN's with `onednn_sgemm`),
/// bfloat16 ones in oneDNN (exact products, float32 accumulation).
template <class T>
void gemm(std::size_t m, std::size_t n, std::size_t k, bool ta, bool tb, const T* a, const T* b, float* c,
          bool onednn_sgemm) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        std::fill_n(c, m * n, 0.0f);
        return;
    }
    const detail::gemm_shape s{1, m, n, k, ta, tb, false};
    if constexpr (std::is_same_v<T, float>) {
        if (onednn_sgemm) {
            detail::onednn_sgemm(s, a, b, c);
        } else {
            detail::openblas_sgemm(s, a, b, c);
        }
    } else {
        detail::onednn_matmul_bf16(s, a, b, c);
    }
}

/// Per-thread scratch reused across calls (large fresh allocations cost a page fault per 4 KiB). Slots
/// 0-3 hold the work buffers of forward/backward, 4-6 and 8 widened inputs, 7 one image's float32 result;
/// conv2d_max_pool's 9 an image's pooled values before they are stored (forward) or one plane's pooled
/// gradient (backward), 10 one plane's gradient before it is stored, 11 an image's results rounded.
enum slot : std::size_t {
    widened_x = 4,
    widened_w = 5,
    widened_other = 6,
    image_result = 7,
    widened_y = 8,
    pooled = 9,
    gradient_plane = 10,
    rounded_values = 11
};

template <class T>
T* scratch(std::size_t slot, std::size_t n) {
    thread_local std::array<std::vector<T>, 12> pool;
    if (pool[slot].size() < n) pool[slot].resize(n);
    return pool[slot].data();
}

/// ReLU as relu() computes it (NaN kept, -0 to +0).
/// The bits kept or cleared by a mask, not a branch: GCC vectorizes every loop that calls it.
inline float relu_of(float v) {
    const std::uint32_t keep = 0u - static_cast<std::uint32_t>((v > 0.0f) | (v != v));
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) & keep);
}

/// The backward pass of a fused ReLU keeps its derivative at the forward's outputs y, as rounded: 1 where
/// y > 0, else 0 (NaN included), in float8_e4m3, one byte an element and exact, instead of y itself (a
/// quarter of y's bytes to read again for float32, and y is not kept alive for it). The gradient is then
/// g · derivative: g where y > 0, else g · 0, the bits of relu()'s gradient.
constexpr std::uint8_t relu_one = float8_e4m3(1.0f).bits();
inline float relu_gradient(float g, bool positive) { return g * (positive ? 1.0f : 0.0f); }

/// Elements [at, at + n) of t as T: t's own when it holds T, else (T is float) widened into this thread's
/// scratch `slot`: the float32 im2col route widens other dtypes image by image, on the thread that works
/// on them. The bfloat16 route runs on bfloat16 tensors only (data<T>() checks).
template <class T>
const T* elements_as(const Tensor& t, std::size_t at, std::size_t n, std::size_t slot) {
    if constexpr (std::is_same_v<T, float>) {
        if (t.dtype() == Dtype::float32) return static_cast<const float*>(t.raw()) + at;
        float* out = scratch<float>(slot, n);
        widen(static_cast<const std::byte*>(t.raw()) + at * size_of(t.dtype()), t.dtype(), out, n);
        return out;
    } else {
        return t.data<T>().data() + at;
    }
}

/// t as float32: its own storage when float32, else widened into this thread's scratch `slot`.
const float* floats_of(const Tensor& t, std::size_t slot) { return elements_as<float>(t, 0, t.size(), slot); }

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

/// Float32 values for elements [at, at + n) of t: its own storage for float32, else this thread's
/// scratch, which commit() rounds into t once (one part of `batch`, which records t's whole rounding).
/// Zeroed when `zero` (for accumulating into).
float* workspace(Tensor& t, std::size_t at, std::size_t n, bool zero) {
    float* v = t.dtype() == Dtype::float32 ? static_cast<float*>(t.raw()) + at : scratch<float>(image_result, n);
    if (zero) std::fill_n(v, n, 0.0f);
    return v;
}

void commit(Tensor& t, std::size_t at, const float* v, std::size_t n, RoundingBatch& batch) {
    if (t.dtype() != Dtype::float32)
        narrow(v, static_cast<std::byte*>(t.raw()) + at * size_of(t.dtype()), n, t.dtype(), batch);
}

/// The ReLU's derivative at y's elements [at, at + n), as rounded, into derivative[at, at + n) (null: not
/// wanted). Run on the thread that has just written those elements, while they are in its cache.
[[gnu::always_inline]] inline void relu_derivative_of(const float* __restrict v, std::uint8_t* __restrict d,
                                                      std::size_t n) {
    // restrict: byte stores may alias anything, and would reload v, d and n on every element
    for (std::size_t i = 0; i < n; ++i) d[i] = v[i] > 0.0f ? relu_one : std::uint8_t{0};
}
void relu_derivative(const Tensor& y, std::size_t at, std::size_t n, std::uint8_t* derivative) {
    if (!derivative) return;
    const float* v = elements_as<float>(y, at, n, widened_y);
    detail::vectorized([&] { relu_derivative_of(v, derivative + at, n); });
}

/// The last pass over the oneDNN route's float32 results `wide` (from workspace(t, ...)), on every thread,
/// image by image at the level's vector width: finish(an image's values), then t's elements of that
/// image rounded once from them, and the ReLU's derivative at them into relu_d (null: not wanted). One
/// thread for a whole tensor left the other waiting (the first cnn layer's output is 11 MB in float32).
template <class Finish>
void finish_images(Tensor& t, float* wide, std::size_t images, std::uint8_t* relu_d, Finish finish) {
    const std::size_t per_image = images > 0 ? t.size() / images : 0;
    RoundingBatch rounding(t);
    detail::split_blocks(images, per_image, [&](std::size_t first, std::size_t end) {
        for (std::size_t n = first; n < end; ++n) {
            float* v = wide + n * per_image;
            detail::vectorized([&] { finish(v); });
            commit(t, n * per_image, v, per_image, rounding);
            relu_derivative(t, n * per_image, per_image, relu_d);
        }
    });
}

/// Images per chunk of the range [lo, hi), balanced so every chunk has about the same size.
std::size_t chunk_size(const geometry& g, std::size_t lo, std::size_t hi) {
    const std::size_t n = std::max<std::size_t>(hi - lo, 1);
    const std::size_t most = std::clamp(chunk_elements / std::max<std::size_t>(1, g.k() * g.l()), std::size_t{1}, n);
    const std::size_t chunks = (n + most - 1) / most;
    return (n + chunks - 1) / chunks;
}

/// Runs part(t, lo, hi) for each thread t of a team, on consecutive slices [lo, hi) of the batch. Each
/// thread works through its own images with single-threaded GEMMs (OpenBLAS and oneDNN run serially
/// inside a parallel region): one fork and one join per pass instead of several per chunk. Batches
/// smaller than the team stay on the calling thread, where the GEMMs themselves use all threads.
template <class Part>
void over_batch(const geometry& g, Part part) {
    const std::size_t threads = static_cast<std::size_t>(omp_get_max_threads());
#pragma omp parallel num_threads(threads) if (g.n >= threads && threads > 1)
    {
        const std::size_t t = static_cast<std::size_t>(omp_get_thread_num()),
                          nt = static_cast<std::size_t>(omp_get_num_threads());
        part(t, g.n * t / nt, g.n * (t + 1) / nt);
    }
}

/// Where the im2col forward pass puts an image's results: values(n) is room for image n's float32 results,
/// which done(n, values) then takes. Here, into y (rounded once) and the ReLU's derivative.
struct into_tensor {
    Tensor& y;
    std::uint8_t* relu_d; // null: not wanted
    std::size_t per_image;
    RoundingBatch rounding{y};
    float* values(std::size_t n) { return workspace(y, n * per_image, per_image, false); }
    void done(std::size_t n, const float* v) {
        commit(y, n * per_image, v, per_image, rounding);
        relu_derivative(y, n * per_image, per_image, relu_d);
    }
};

template <class T, class Images>
void forward(const geometry& g, const Tensor& x, const T* w, const float* bias, float alpha, bool onednn_sgemm,
             Images& images) {
    over_batch(g, [&](std::size_t, std::size_t lo, std::size_t hi) {
        const std::size_t k = g.k(), l = g.l(), most = chunk_size(g, lo, hi), image = g.c * g.h * g.w;
        T* cols = scratch<T>(0, k * most * l);
        float* prod = scratch<float>(1, g.o * most * l);
        for (std::size_t n0 = lo; n0 < hi; n0 += most) {
            const std::size_t nb = std::min(most, hi - n0), row = nb * l;
            for (std::size_t b = 0; b < nb; ++b)
                detail::vectorized(
                    [&] { im2col(g, elements_as<T>(x, (n0 + b) * image, image, widened_x), row, b, cols); });
            gemm(g.o, row, k, false, false, w, cols, prod, onednn_sgemm); // (O, nb·L) = w · cols
            for (std::size_t b = 0; b < nb; ++b) { // y[n0 + b] = alpha · prod[:, b·L : (b+1)·L] + bias, rounded once
                float* dst = images.values(n0 + b);
                detail::vectorized([&] {
                    for (std::size_t o = 0; o < g.o; ++o) {
                        const float* src = prod + o * row + b * l;
                        const float add = bias ? bias[o] : 0.0f;
                        if (g.opt.relu) {
                            for (std::size_t i = 0; i < l; ++i) dst[o * l + i] = relu_of(src[i] * alpha + add);
                        } else {
                            for (std::size_t i = 0; i < l; ++i) dst[o * l + i] = src[i] * alpha + add;
                        }
                    }
                });
                images.done(n0 + b, dst);
            }
        }
    });
}

/// Partial sums of sum_in_lanes: element i of a run goes into sum i mod 16, and the 16 are folded
/// pairwise (8 + 8, 4 + 4, 2 + 2, 1 + 1): one order at every level (a vector of AVX-512, two of AVX2,
/// four of SSE). A single running sum is a chain of dependent additions, one per 4 cycles, that no
/// level can vectorize.
constexpr std::size_t sum_lanes = detail::vector_lanes;

/// The float32 sum of value(i) for i in [0, n), in the order above.
template <class Value>
[[gnu::always_inline]] inline float sum_in_lanes(std::size_t n, Value value) {
    float sums[sum_lanes] = {};
    std::size_t i = 0;
    for (; i + sum_lanes <= n; i += sum_lanes)
        for (std::size_t lane = 0; lane < sum_lanes; ++lane) sums[lane] += value(i + lane);
    for (std::size_t lane = 0; i + lane < n; ++lane) sums[lane] += value(i + lane);
    return detail::fold_lanes(sums);
}

/// dst[0, n) = dy[0, n), times the ReLU's derivative (relu_gradient: exact, dy or a zero) when `masked`,
/// and the float32 sum of dst in the order above.
template <bool masked, class T>
float copy_summing(const T* __restrict dy, const std::uint8_t* __restrict derivative, T* __restrict dst,
                   std::size_t n) {
    return sum_in_lanes(n, [&](std::size_t i) {
        if constexpr (masked) {
            dst[i] = T(relu_gradient(static_cast<float>(dy[i]), derivative[i] != 0));
        } else {
            dst[i] = dy[i];
        }
        return static_cast<float>(dst[i]);
    });
}

/// Where the im2col backward pass gets an image's output gradient: put(n, dst, row, db) writes image n's
/// planes of dY at dst + o·row (o < O) and adds each plane's sum to db[o]. Here, from the tensor dy,
/// times the ReLU's derivative when the forward applied one (relu_d, else null).
template <class T>
struct from_tensor {
    const geometry& g;
    const Tensor& dy;
    const Tensor* relu_d;
    void put(std::size_t n, T* dst, std::size_t row, float* db) const {
        const std::size_t l = g.l(), at = n * g.o * l;
        const T* dyb = elements_as<T>(dy, at, g.o * l, widened_other);
        const std::uint8_t* rd = relu_d ? static_cast<const std::uint8_t*>(relu_d->raw()) + at : nullptr;
        detail::vectorized([&] {
            for (std::size_t o = 0; o < g.o; ++o)
                db[o] += rd ? copy_summing<true>(dyb + o * l, rd + o * l, dst + o * row, l)
                            : copy_summing<false>(dyb + o * l, rd, dst + o * row, l);
        });
    }
};

struct conv_grads {
    Tensor* dx;     // (N, C, H, W), or null when not wanted
    float *dw, *db; // (O, C·kh·kw), (O) or null
    float dx_alpha; // dx's sums are multiplied by this before they are rounded
};

/// What a backward pass sums into: dx in dx_dtype (only when the tape wants the input's gradient, not
/// for a batch of data), dw and, with a bias, dbias in dw_dtype; finish() rounds each once.
struct gradient_sums {
    std::optional<Tensor> dx;
    float_result dw;
    std::optional<float_result> db;
    gradient_sums(const geometry& g, const Tensor& x, const Tensor& w, bool bias, Dtype dx_dtype, Dtype dw_dtype)
        : dw(w.shape(), dw_dtype) {
        if (gradient_needed(0)) dx = Tensor::uninitialized(x.shape(), dx_dtype);
        if (bias) db.emplace(Shape{g.o}, dw_dtype);
    }
    gradient_sums(const gradient_sums&) = delete; // dw.data may point into dw itself
    gradient_sums& operator=(const gradient_sums&) = delete;
    conv_grads grads(float dx_alpha) { return {dx ? &*dx : nullptr, dw.data, db ? db->data : nullptr, dx_alpha}; }
    Gradients finish() {
        Gradients result{dx, dw.finish()};
        if (db) result.push_back(db->finish());
        return result;
    }
};

template <class T, class Source>
void backward(const geometry& g, const Tensor& x, const T* w, const Source& source, conv_grads d, bool onednn_sgemm) {
    const std::size_t k = g.k(), l = g.l(), image = g.c * g.h * g.w, sums = g.o * k + g.o;
    // Each thread sums its images' dw and dbias into its own slice; the slices are added in thread order.
    std::vector<float> partial(sums * static_cast<std::size_t>(omp_get_max_threads()), 0.0f);
    RoundingBatch rounding(d.dx ? d.dx->raw() : nullptr, d.dx ? d.dx->nbytes() : 0);
    over_batch(g, [&](std::size_t t, std::size_t lo, std::size_t hi) {
        const std::size_t most = chunk_size(g, lo, hi);
        float *dw = partial.data() + t * sums, *db = dw + g.o * k;
        T* cols = scratch<T>(0, k * most * l);
        T* dyp = scratch<T>(1, g.o * most * l);
        float* dcols = d.dx ? scratch<float>(2, k * most * l) : nullptr;
        float* dw_chunk = scratch<float>(3, g.o * k);
        for (std::size_t n0 = lo; n0 < hi; n0 += most) {
            const std::size_t nb = std::min(most, hi - n0), row = nb * l;
            for (std::size_t b = 0; b < nb; ++b) {
                source.put(n0 + b, dyp + b * l, row, db); // dY as (O, nb·L), summing dbias on the way
                detail::vectorized(
                    [&] { im2col(g, elements_as<T>(x, (n0 + b) * image, image, widened_x), row, b, cols); });
            }
            gemm(g.o, k, row, false, true, dyp, cols, dw_chunk, onednn_sgemm); // dY · colsᵀ
            for (std::size_t i = 0; i < g.o * k; ++i) dw[i] += dw_chunk[i];
            if (!d.dx) continue;
            gemm(k, row, g.o, true, false, w, dyp, dcols, onednn_sgemm); // wᵀ · dY
            for (std::size_t b = 0; b < nb; ++b) {
                float* dx = workspace(*d.dx, (n0 + b) * image, image, true);
                detail::vectorized([&] { col2im(g, dcols, row, b, dx); });
                if (d.dx_alpha != 1.0f)
                    for (std::size_t i = 0; i < image; ++i) dx[i] *= d.dx_alpha;
                commit(*d.dx, (n0 + b) * image, dx, image, rounding);
            }
        }
    });
    for (std::size_t t = 0; t * sums < partial.size(); ++t) {
        const float* p = partial.data() + t * sums;
        for (std::size_t i = 0; i < g.o * k; ++i) d.dw[i] += p[i];
        if (d.db)
            for (std::size_t o = 0; o < g.o; ++o) d.db[o] += p[g.o * k + o];
    }
}

/// The route of a convolution: oneDNN's primitives (bfloat16 operands as they are where the level has
/// AVX512-BF16, every other dtype widened to float32), or im2col and a GEMM (OpenBLAS's or oneDNN's sgemm
/// on float32 operands). See ops_conv.hpp for which one `automatic` takes, and why.
enum class route { onednn_bf16, onednn_f32, im2col_bf16, im2col_f32, im2col_f32_onednn };

/// The route of `backend` (not measured; automatic as the process has it) for this shape and dtype.
route route_of(const geometry& g, Dtype dtype, ConvBackend backend) {
    if (backend == ConvBackend::automatic) backend = conv_backend();
    const bool bf16 = dtype == Dtype::bfloat16 && detail::onednn_bf16_available();
    // oneDNN wants every dimension nonzero; empty shapes stay on the im2col path
    const bool onednn = g.n > 0 && g.c > 0 && g.o > 0 && g.l() > 0 &&
                        (backend == ConvBackend::onednn || (backend == ConvBackend::automatic && bf16));
    if (onednn) return bf16 ? route::onednn_bf16 : route::onednn_f32;
    if (bf16) return route::im2col_bf16;
    return backend == ConvBackend::im2col_onednn ? route::im2col_f32_onednn : route::im2col_f32;
}

/// The route of `backend` for this shape and dtype, or none when the route is to be measured.
std::optional<route> pinned_route(const geometry& g, Dtype dtype, ConvBackend backend) {
    if (backend == ConvBackend::measured ||
        (backend == ConvBackend::automatic && conv_backend() == ConvBackend::measured))
        return std::nullopt;
    return route_of(g, dtype, backend);
}

detail::conv_shape onednn_shape(const geometry& g, route r) {
    const auto& o = g.opt;
    return {g.n,
            g.c,
            g.h,
            g.w,
            g.o,
            g.kh,
            g.kw,
            g.ho,
            g.wo,
            {o.stride[0], o.stride[1]},
            {o.dilation[0], o.dilation[1]},
            {o.padding[0], o.padding[1]},
            r == route::onednn_bf16 ? detail::conv_operands::bf16 : detail::conv_operands::f32};
}

/// What oneDNN reads for t on route r: t's own bfloat16 values, or float32 ones (widened into scratch
/// `slot` unless t is float32).
const void* onednn_operand(const Tensor& t, route r, std::size_t slot) {
    return r == route::onednn_bf16 ? t.raw() : floats_of(t, slot);
}

/// The forward pass on route r: y = alpha · (w ⊛ x) + bias in `out`, every sum in float32 and each
/// result rounded once; with g.opt.relu, the ReLU's derivative at y in relu_d's bytes (null: not wanted).
/// On a oneDNN route, the run's number goes to `run` (detail::onednn_conv_forward).
Tensor run_forward(const geometry& g, route r, const Tensor& x, const Tensor& w, const float* b, float alpha, Dtype out,
                   std::uint8_t* relu_d, std::uint64_t& run) {
    Tensor y = Tensor::uninitialized(Shape{g.n, g.o, g.ho, g.wo}, out);
    switch (r) {
    case route::onednn_bf16:
    case route::onednn_f32: {
        float* wide = workspace(y, 0, y.size(), false);
        run = detail::onednn_conv_forward(onednn_shape(g, r), onednn_operand(x, r, widened_x),
                                          onednn_operand(w, r, widened_w), alpha == 1.0f ? b : nullptr, wide);
        if (alpha == 1.0f && !g.opt.relu && y.dtype() == Dtype::float32) break; // oneDNN wrote y
        finish_images(y, wide, g.n, relu_d, [&](float* v) {
            if (alpha != 1.0f) // the bias after the scale, as on the im2col route
                for (std::size_t o = 0; o < g.o; ++o) {
                    const float add = b ? b[o] : 0.0f;
                    for (std::size_t i = 0; i < g.l(); ++i) v[o * g.l() + i] = v[o * g.l() + i] * alpha + add;
                }
            if (g.opt.relu)
                for (std::size_t i = 0; i < g.o * g.l(); ++i) v[i] = relu_of(v[i]);
        });
        break;
    }
    case route::im2col_bf16: {
        into_tensor images{y, relu_d, g.o * g.l()};
        forward(g, x, w.data<bfloat16>().data(), b, alpha, false, images);
        break;
    }
    case route::im2col_f32:
    case route::im2col_f32_onednn: {
        into_tensor images{y, relu_d, g.o * g.l()};
        forward(g, x, floats_of(w, widened_w), b, alpha, r == route::im2col_f32_onednn, images);
        break;
    }
    }
    return y;
}

/// dy times the ReLU's derivative d (relu_derivative): the gradient of a ReLU applied to the forward's
/// results, as a tensor of its own (the im2col route masks dy as it copies it instead).
Tensor relu_masked(const Tensor& dy, const Tensor& d) {
    return kernels::detail::zip(dy, d, dy.dtype(), [](float g, float one_or_zero) { return g * one_or_zero; });
}

/// The backward pass on a oneDNN route into d: run(dx) runs oneDNN's, which writes dx's float32 sums at
/// dx (null when not wanted); they are then multiplied by d.dx_alpha and rounded once.
template <class Run>
void onednn_backward(const geometry& g, conv_grads d, Run run) {
    float* wide = d.dx ? workspace(*d.dx, 0, d.dx->size(), false) : nullptr;
    run(wide);
    if (d.dx && (d.dx_alpha != 1.0f || d.dx->dtype() != Dtype::float32))
        finish_images(*d.dx, wide, g.n, nullptr, [&](float* v) {
            if (d.dx_alpha != 1.0f)
                for (std::size_t i = 0; i < g.c * g.h * g.w; ++i) v[i] *= d.dx_alpha;
        });
}

/// The backward pass on route r for the output gradient dy: {dx (when the tape wants it) in dx_dtype, dw
/// in dw_dtype, and dbias from dy when `bias`}, the sums of dx and dw multiplied by dx_alpha and dw_alpha
/// before their one rounding. With `relu_d` (the ReLU's derivative, when the forward applied one), dy is
/// first multiplied by it. forward_run: the forward's run on a oneDNN route (run_forward), or 0.
Gradients run_backward(const geometry& g, route r, const Tensor& x, const Tensor& w, const Tensor& dy, bool bias,
                       Dtype dx_dtype, Dtype dw_dtype, const Tensor* relu_d, std::uint64_t forward_run,
                       float dx_alpha = 1.0f, float dw_alpha = 1.0f) {
    gradient_sums sums(g, x, w, bias, dx_dtype, dw_dtype);
    const conv_grads d = sums.grads(dx_alpha);
    switch (r) {
    case route::onednn_bf16:
    case route::onednn_f32:
        onednn_backward(g, d, [&](float* dx) {
            const Tensor dz = relu_d ? relu_masked(dy, *relu_d) : dy;
            detail::onednn_conv_backward(onednn_shape(g, r), onednn_operand(x, r, widened_x), forward_run,
                                         onednn_operand(w, r, widened_w), onednn_operand(dz, r, widened_other), dx,
                                         d.dw, d.db);
        });
        break;
    case route::im2col_bf16:
        backward(g, x, w.data<bfloat16>().data(), from_tensor<bfloat16>{g, dy, relu_d}, d, false);
        break;
    case route::im2col_f32:
    case route::im2col_f32_onednn:
        backward(g, x, floats_of(w, widened_w), from_tensor<float>{g, dy, relu_d}, d, r == route::im2col_f32_onednn);
        break;
    }
    if (dw_alpha != 1.0f)
        for (std::size_t i = 0; i < w.size(); ++i) d.dw[i] *= dw_alpha;
    return sums.finish();
}

/// run(r) on the route measured for this pass, shape and dtype (the first call measures each named
/// backend's route, those that differ: detail::run_fastest).
template <class Run>
auto run_measured(const std::string& pass, const geometry& g, Dtype dtype, Run run) {
    const auto& o = g.opt;
    const std::string key = "conv2d " + pass + " x " + Shape{g.n, g.c, g.h, g.w}.to_string() + " w " +
                            Shape{g.o, g.c, g.kh, g.kw}.to_string() + " " + std::string(name_of(dtype)) + " stride " +
                            pair_text(o.stride) + " padding " + pair_text(o.padding) + " dilation " +
                            pair_text(o.dilation);
    std::vector<std::string_view> names;
    std::vector<route> routes;
    for (ConvBackend b : {ConvBackend::im2col, ConvBackend::im2col_onednn, ConvBackend::onednn}) {
        const route r = route_of(g, dtype, b);
        if (std::find(routes.begin(), routes.end(), r) != routes.end()) continue;
        names.push_back(name_of(b));
        routes.push_back(r);
    }
    return detail::run_fastest(key, names, [&](std::size_t i) { return run(routes[i]); });
}

/// run(r) on the `pinned` route, or on the one measured for this pass, shape and dtype when there is none.
template <class Run>
auto run_on(const std::optional<route>& pinned, const std::string& pass, const geometry& g, Dtype dtype, Run run) {
    return pinned ? run(*pinned) : run_measured(pass, g, dtype, run);
}

/// Whether a tape will record a convolution of x, w and bias.
bool conv_recorded(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias) {
    return bias ? should_record({&x, &w, &*bias}) : should_record({&x, &w});
}

/// Records y = conv(x, w, bias) on the tape (conv_recorded), with its backward `grads`.
template <class Grads>
void record_conv(const Tensor& y, const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, Grads grads) {
    if (bias) {
        record(y, {&x, &w, &*bias}, std::move(grads));
    } else {
        record(y, {&x, &w}, std::move(grads));
    }
}

/// Room for the ReLU's derivative at the outputs of a convolution that applies one and is recorded (none
/// otherwise), and its bytes for run_forward.
std::optional<Tensor> relu_derivative_for(const geometry& g, bool recorded) {
    if (!g.opt.relu || !recorded) return std::nullopt;
    return Tensor::uninitialized(Shape{g.n, g.o, g.ho, g.wo}, Dtype::float8_e4m3);
}
std::uint8_t* bytes_of(std::optional<Tensor>& d) { return d ? static_cast<std::uint8_t*>(d->raw()) : nullptr; }

/// Σ_{n,i,j} dy[n, o, i, j] for each output channel o, in float32, rounded once into `dtype`.
Tensor bias_gradient(const geometry& g, const Tensor& dy, Dtype dtype) {
    float_result db(Shape{g.o}, dtype);
    const float* v = floats_of(dy, widened_other);
    for (std::size_t n = 0; n < g.n; ++n)
        for (std::size_t o = 0; o < g.o; ++o) {
            const float* p = v + (n * g.o + o) * g.l();
            float s = 0;
            for (std::size_t i = 0; i < g.l(); ++i) s += p[i];
            db.data[o] += s;
        }
    return db.finish();
}

/// v[0, n) rounded to `dtype` and back: the values a tensor of that dtype holds (v itself for float32).
void round_in_place(float* v, std::size_t n, Dtype dtype) {
    if (dtype == Dtype::float32) return;
    void* rounded = scratch<std::byte>(rounded_values, n * size_of(dtype));
    narrow(v, rounded, n, dtype);
    widen(rounded, dtype, v, n);
}

/// The images of conv2d_max_pool's forward pass: each image's float32 results (this thread's scratch, never
/// written whole) rounded to y's dtype as the convolution's output would hold them, then pooled in 2×2
/// windows into y, each window's argmax into idx (an index into the convolution's output, as max_pool2d
/// keeps it). The pooled values are y's own, stored exactly. onednn() takes oneDNN's results instead,
/// before the ReLU.
struct pooled_2x2 {
    const geometry& g;
    Tensor& y;
    std::uint32_t* idx;
    float* values(std::size_t) { return scratch<float>(image_result, g.o * g.l()); }
    void done(std::size_t n, float* v) {
        round_in_place(v, g.o * g.l(), y.dtype());
        pool(n, [&](float* pooled_values) {
            const std::size_t l = g.l(), ho = g.ho / 2, wo = g.wo / 2, out = ho * wo;
            for (std::size_t o = 0; o < g.o; ++o) {
                const std::size_t plane = n * g.o + o;
                for (std::size_t i = 0; i < ho; ++i)
                    detail::argmax_2x2_row(v + o * l + 2 * i * g.wo, v + o * l + (2 * i + 1) * g.wo, wo,
                                           static_cast<std::uint32_t>(plane * l + 2 * i * g.wo),
                                           static_cast<std::uint32_t>(g.wo), idx + plane * out + i * wo,
                                           pooled_values + o * out + i * wo);
            }
        });
    }
    /// Image n's results from oneDNN, laid out by `block` (conv_kernels.hpp), before the ReLU (when fused).
    /// A channel-blocked image is pooled where oneDNN wrote it, each value through the ReLU and rounded as
    /// it is read (float32, float16 and bfloat16; other dtypes rounded in a pass before).
    void onednn(std::size_t n, float* v, std::size_t block) {
        const Dtype dtype = y.dtype();
        if (block && (dtype == Dtype::float32 || dtype == Dtype::bfloat16 || dtype == Dtype::float16)) {
            const auto with = [&]<class S>(S) {
                if (g.opt.relu) return pool_blocked(n, v, block, [](float x) { return as_stored<S, true>(x); });
                pool_blocked(n, v, block, [](float x) { return as_stored<S, false>(x); });
            };
            if (dtype == Dtype::float32) return with(0.0f);
            if (dtype == Dtype::bfloat16) return with(bfloat16::spec{});
            return with(float16::spec{});
        }
        const std::size_t size = (block ? (g.o + block - 1) / block * block : g.o) * g.l();
        if (g.opt.relu)
            detail::vectorized([&] {
                for (std::size_t i = 0; i < size; ++i) v[i] = relu_of(v[i]);
            });
        if (!block) return done(n, v);
        round_in_place(v, size, dtype);
        pool_blocked(n, v, block, [](float x) { return x; });
    }
    /// x through the fused ReLU when `relu`, then as format S holds it (float: as it is). No branches, so
    /// the loops that call it vectorize.
    template <class S, bool relu>
    static float as_stored(float x) {
        if constexpr (relu) x = relu_of(x);
        if constexpr (std::is_same_v<S, float>) {
            return x;
        } else {
            return round_trip<S>(x);
        }
    }
    /// Image n's windows from v, laid out in blocks of `block` channels (8 or 16), each value taken as
    /// value(v[…]).
    template <class Value>
    void pool_blocked(std::size_t n, const float* v, std::size_t block, Value value) {
        pool(n, [&](float* pooled_values) {
            const std::size_t l = g.l(), out = (g.ho / 2) * (g.wo / 2);
            const auto first = static_cast<std::uint32_t>(n * g.o * l);
            const auto blocks = [&]<std::size_t B>(std::integral_constant<std::size_t, B>) {
                for (std::size_t o = 0; o < g.o; o += B)
                    detail::argmax_2x2_blocked<B>(
                        v + o * l, g.ho, g.wo, std::min(B, g.o - o), first + static_cast<std::uint32_t>(o * l),
                        static_cast<std::uint32_t>(l), idx + (n * g.o + o) * out, pooled_values + o * out, value);
            };
            if (block == 16) return blocks(std::integral_constant<std::size_t, 16>{});
            blocks(std::integral_constant<std::size_t, 8>{});
        });
    }
    /// pool_into(values) writes image n's pooled values, plane by plane, at `values`; stored into y.
    template <class Pool>
    void pool(std::size_t n, Pool pool_into) {
        const std::size_t out = (g.ho / 2) * (g.wo / 2);
        float* pooled_values = y.dtype() == Dtype::float32 ? static_cast<float*>(y.raw()) + n * g.o * out
                                                           : scratch<float>(pooled, g.o * out);
        detail::vectorized([&] { pool_into(pooled_values); });
        if (y.dtype() != Dtype::float32)
            narrow(pooled_values, static_cast<std::byte*>(y.raw()) + n * g.o * out * size_of(y.dtype()), g.o * out,
                   y.dtype());
    }
};

/// The output gradient of conv2d_max_pool's convolution, image by image (a source for backward(), and for
/// oneDNN's backward pass): each plane's windows give their pooled gradient to their argmax, times the
/// ReLU's derivative there (the pooled y > 0: y at the argmax), and 0 to every other element: what
/// max_pool2d's backward pass and the ReLU's mask make of it, without writing either whole. Every value is
/// one of dy's, so storing it as T is exact.
template <class T>
struct from_pooled {
    const geometry& g;
    const Tensor& dy;         // (N, O, Ho/2, Wo/2)
    const Tensor& y;          // the forward's pooled results
    const std::uint32_t* idx; // their argmax
    /// Image n's planes at dst + o·row, each plane's sum added to db[o] (null: not wanted).
    void put(std::size_t n, T* dst, std::size_t row, float* db) const {
        const std::size_t l = g.l(), out = (g.ho / 2) * (g.wo / 2);
        const float* d = window_gradients(n);
        detail::vectorized([&] {
            for (std::size_t o = 0; o < g.o; ++o) {
                float* p;
                if constexpr (std::is_same_v<T, float>) {
                    p = dst + o * row;
                } else {
                    p = scratch<float>(gradient_plane, l);
                }
                const std::size_t plane = n * g.o + o;
                detail::gradient_2x2_plane(idx + plane * out, d + o * out, static_cast<std::uint32_t>(plane * l), g.ho,
                                           g.wo, p);
                if (db) db[o] += sum_in_lanes(l, [&](std::size_t i) { return p[i]; });
                if constexpr (!std::is_same_v<T, float>) narrow(p, dst + o * row, l, dtype_of<T>);
            }
        });
    }
    /// Image n laid out by `block` (8 or 16, conv_kernels.hpp) at dst: zeros, each window's argmax then
    /// given its value as put() gives it (the same bits).
    void put_blocked(std::size_t n, T* dst, std::size_t block) const {
        const std::size_t l = g.l(), out = (g.ho / 2) * (g.wo / 2), size = g.o * out,
                          padded = (g.o + block - 1) / block * block;
        std::memset(static_cast<void*>(dst), 0, padded * l * sizeof(T));
        const float* d = window_gradients(n);
        float* sums = scratch<float>(rounded_values, size);
        detail::vectorized([&] {
            for (std::size_t j = 0; j < size; ++j) sums[j] = 0.0f + d[j]; // as gradient_2x2_run
        });
        const T* values;
        if constexpr (std::is_same_v<T, float>) {
            values = sums;
        } else {
            T* rounded = scratch<T>(gradient_plane, size);
            narrow(sums, rounded, size, dtype_of<T>);
            values = rounded;
        }
        const std::uint32_t* at = idx + n * size;
        for (std::size_t o = 0; o < g.o; ++o) {
            T* blocked = dst + (o / block) * l * block + o % block;
            const auto base = static_cast<std::uint32_t>((n * g.o + o) * l);
            for (std::size_t j = o * out; j < (o + 1) * out; ++j) blocked[(at[j] - base) * block] = values[j];
        }
    }
    /// Image n's pooled gradients (O, Ho/2, Wo/2) in float32, times the ReLU's derivative when fused: dy's
    /// own or this thread's scratch, widened by the thread that takes the image.
    const float* window_gradients(std::size_t n) const {
        const std::size_t size = g.o * (g.ho / 2) * (g.wo / 2);
        const float* d = elements_as<float>(dy, n * size, size, widened_other);
        if (!g.opt.relu) return d;
        const float* yp = elements_as<float>(y, n * size, size, widened_y);
        float* masked = scratch<float>(pooled, size);
        detail::vectorized([&] {
            for (std::size_t j = 0; j < size; ++j) masked[j] = relu_gradient(0.0f + d[j], yp[j] > 0.0f);
        });
        return masked;
    }
};

/// Whether conv2d_max_pool pools in the convolution's own pass: for a pool of at least one window and
/// argmax indices that fit 32 bits; for dtypes other than float32, only while no rounding is recorded
/// (the convolution's output is rounded in pieces that never form a tensor, and the backward pass makes
/// fewer exact roundings than the two ops).
bool pools_in_pass(const geometry& g, Dtype dtype) {
    return g.ho >= 2 && g.wo >= 2 && g.n * g.o * g.l() <= std::numeric_limits<std::uint32_t>::max() &&
           (dtype == Dtype::float32 || !active_rounding_recorder());
}

/// conv2d_max_pool's forward pass: the pooled outputs and their argmax (indices into the convolution's
/// output, as max_pool2d keeps them).
struct pooled_result {
    Tensor y;
    std::shared_ptr<std::uint32_t[]> idx;
    std::uint64_t onednn_run = 0; // run_forward's
};

pooled_result pooled_forward(const geometry& g, route r, const Tensor& x, const Tensor& w, const float* b) {
    pooled_result out{Tensor::uninitialized(Shape{g.n, g.o, g.ho / 2, g.wo / 2}, x.dtype()), nullptr};
    out.idx = std::make_shared_for_overwrite<std::uint32_t[]>(out.y.size());
    pooled_2x2 images{g, out.y, out.idx.get()};
    switch (r) {
    case route::onednn_bf16:
    case route::onednn_f32:
        out.onednn_run = detail::onednn_conv_forward_images(
            onednn_shape(g, r), onednn_operand(x, r, widened_x), onednn_operand(w, r, widened_w), b,
            [&](std::size_t n, float* v, std::size_t block) { images.onednn(n, v, block); });
        break;
    case route::im2col_bf16:
        forward(g, x, w.data<bfloat16>().data(), b, 1.0f, false, images);
        break;
    case route::im2col_f32:
    case route::im2col_f32_onednn:
        forward(g, x, floats_of(w, widened_w), b, 1.0f, r == route::im2col_f32_onednn, images);
        break;
    }
    return out;
}

/// The most taps (C·kh·kw) of a first layer whose weights pass runs from the windows: 3 channels of 3 × 3.
/// The products are then few next to the reads and writes of a dense output gradient (the cnn's first
/// layer: 9 a result).
constexpr std::size_t window_pass_taps = 27;

/// Whether conv2d_max_pool's weights pass runs from the pooled gradient (pooled_weights.hpp): for a layer
/// whose input needs no gradient (a first layer) of at most window_pass_taps taps, stride 1, no dilation
/// and no padding (an infinite gradient times a padding zero: NaN on the im2col route, skipped by
/// oneDNN's).
bool windows_pass_applies(const geometry& g, const conv_grads& d) {
    const auto& o = g.opt;
    return !d.dx && g.k() <= window_pass_taps && o.stride == std::array<std::size_t, 2>{1, 1} &&
           o.dilation == std::array<std::size_t, 2>{1, 1} && o.padding == std::array<std::size_t, 2>{0, 0};
}

/// dw and dbias of conv2d_max_pool from the pooled gradient and the argmax: each image's sums made lane by
/// lane and folded, then the images' sums added in image order (the same bits for any number of threads).
/// False, with nothing written, when an input is not finite: the general path then multiplies every
/// output gradient, zeros included, as the two ops would (0 · ∞ is NaN).
bool weights_from_windows(const geometry& g, const Tensor& x, const from_pooled<float>& source, conv_grads d) {
    const detail::window_geometry wg{g.c, g.h, g.w, g.o, g.kh, g.kw, g.ho, g.wo};
    constexpr std::size_t L = detail::vector_lanes;
    const std::size_t taps = wg.taps(), per_image = g.o * taps + g.o, image = g.c * g.h * g.w, out = g.o * wg.windows();
    std::vector<float> sums(g.n * per_image);
    std::vector<unsigned char> finite(g.n);
    detail::split_blocks(g.n, per_image, [&](std::size_t first, std::size_t end) {
        for (std::size_t n = first; n < end; ++n) {
            float* split = scratch<float>(0, wg.split_size());
            float* gathered = scratch<float>(1, wg.gathered_size());
            float* lanes = scratch<float>(2, per_image * L);
            const float* xv = elements_as<float>(x, n * image, image, widened_x);
            finite[n] = detail::vectorized([&] { return detail::split_columns(wg, xv, split); });
            if (!finite[n]) continue;
            const float* dv = source.window_gradients(n);
            const std::uint32_t* idx = source.idx + n * out;
            const auto base = static_cast<std::uint32_t>(n * g.o * g.l());
            detail::vectorized([&] {
                detail::gather_windows(wg, split, gathered);
                float* db = lanes + g.o * taps * L;
                if (g.c == 1 && g.kh == 3 && g.kw == 3) {
                    detail::pooled_weights<1, 3, 3>(wg, gathered, dv, idx, base, lanes, db);
                } else {
                    detail::pooled_weights<0, 0, 0>(wg, gathered, dv, idx, base, lanes, db);
                }
                for (std::size_t t = 0; t < per_image; ++t) sums[n * per_image + t] = detail::fold_lanes(lanes + t * L);
            });
        }
    });
    if (std::find(finite.begin(), finite.end(), 0) != finite.end()) return false;
    for (std::size_t n = 0; n < g.n; ++n) {
        const float* s = sums.data() + n * per_image;
        for (std::size_t t = 0; t < g.o * taps; ++t) d.dw[t] += s[t];
        if (d.db)
            for (std::size_t o = 0; o < g.o; ++o) d.db[o] += s[g.o * taps + o];
    }
    return true;
}

/// conv2d_max_pool's backward pass on route r for the pooled outputs' gradient dy: {dx (when the tape
/// wants it), dw, and dbias when `bias`}.
Gradients pooled_backward(const geometry& g, route r, const Tensor& x, const Tensor& w, bool bias, const Tensor& dy,
                          const pooled_result& forward_result) {
    gradient_sums sums(g, x, w, bias, x.dtype(), w.dtype());
    const conv_grads d = sums.grads(1.0f);
    const auto source = [&]<class T>(T) { return from_pooled<T>{g, dy, forward_result.y, forward_result.idx.get()}; };
    if (windows_pass_applies(g, d) && weights_from_windows(g, x, source(0.0f), d)) return sums.finish();
    switch (r) {
    case route::onednn_bf16:
    case route::onednn_f32:
        onednn_backward(g, d, [&](float* dx) {
            detail::onednn_conv_backward_images(
                onednn_shape(g, r), onednn_operand(x, r, widened_x), forward_result.onednn_run,
                onednn_operand(w, r, widened_w),
                [&](std::size_t n, void* dst, std::size_t block) {
                    const auto put = [&]<class T>(T) {
                        if (block) return source(T{}).put_blocked(n, static_cast<T*>(dst), block);
                        source(T{}).put(n, static_cast<T*>(dst), g.l(), nullptr);
                    };
                    if (r == route::onednn_bf16) return put(bfloat16{});
                    put(0.0f);
                },
                dx, d.dw, d.db);
        });
        break;
    case route::im2col_bf16:
        backward(g, x, w.data<bfloat16>().data(), source(bfloat16{}), d, false);
        break;
    case route::im2col_f32:
    case route::im2col_f32_onednn:
        backward(g, x, floats_of(w, widened_w), source(0.0f), d, r == route::im2col_f32_onednn);
        break;
    }
    return sums.finish();
}

} // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, Conv2dOptions options) {
    const geometry g = check(x, w, bias, options);
    const std::optional<route> pinned = pinned_route(g, x.dtype(), options.backend);
    const float* b = bias ? floats_of(*bias, widened_other) : nullptr;
    const bool recorded = conv_recorded(x, w, bias);
    std::optional<Tensor> relu_d = relu_derivative_for(g, recorded);
    std::uint64_t run = 0;
    const auto forward_on = [&](route on) {
        return run_forward(g, on, x, w, b, 1.0f, x.dtype(), bytes_of(relu_d), run);
    };
    const Tensor y = run_on(pinned, "forward", g, x.dtype(), forward_on);
    if (!recorded) return y;
    const auto grads = [x, w, has_bias = bias.has_value(), g, pinned, relu_d, run](const Tensor& dy) {
        const auto backward_on = [&](route on) {
            return run_backward(g, on, x, w, dy, has_bias, x.dtype(), w.dtype(), relu_d ? &*relu_d : nullptr, run);
        };
        return run_on(pinned, "backward", g, x.dtype(), backward_on);
    };
    record_conv(y, x, w, bias, grads);
    return y;
}

Tensor conv2d_fp8(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Fp8DenseCasts& casts,
                  Conv2dOptions options) {
    const geometry g = check(x, w, bias, options);
    const detail::Fp8Operand qx = detail::fp8_operand(x, casts.input, "conv2d_fp8", "input"),
                             qw = detail::fp8_operand(w, casts.kernel, "conv2d_fp8", "kernel");
    const std::optional<route> pinned = pinned_route(g, qx.q.dtype(), options.backend); // FP8: a float32 route
    const float* b = bias ? floats_of(*bias, widened_other) : nullptr;
    const bool recorded = conv_recorded(x, w, bias);
    std::optional<Tensor> relu_d = relu_derivative_for(g, recorded);
    std::uint64_t run = 0;
    const auto forward_on = [&](route on) {
        return run_forward(g, on, qx.q, qw.q, b, qx.inverse * qw.inverse, x.dtype(), bytes_of(relu_d), run);
    };
    const Tensor y = run_on(pinned, "forward", g, qx.q.dtype(), forward_on);
    if (!recorded) return y;
    const auto grads = [qx, qw, grad = casts.output_grad, has_bias = bias.has_value(), g, pinned, x_dtype = x.dtype(),
                        w_dtype = w.dtype(), relu_d, run](const Tensor& output_grad) {
        const Tensor dy = relu_d ? relu_masked(output_grad, *relu_d) : output_grad; // before the FP8 cast
        Gradients result(has_bias ? 3 : 2);
        if (has_bias && gradient_needed(2)) result[2] = bias_gradient(g, dy, w_dtype); // from dy, not its cast
        if (!gradient_needed(0) && !gradient_needed(1)) return result;
        const detail::Fp8Operand qg = detail::fp8_operand(dy, grad, "conv2d_fp8", "output gradient");
        const auto backward_on = [&](route on) {
            return run_backward(g, on, qx.q, qw.q, qg.q, false, x_dtype, w_dtype, nullptr, run, qg.inverse * qw.inverse,
                                qx.inverse * qg.inverse);
        };
        Gradients d = run_on(pinned, "backward", g, qx.q.dtype(), backward_on);
        result[0] = std::move(d[0]);
        result[1] = std::move(d[1]);
        return result;
    };
    record_conv(y, x, w, bias, grads);
    return y;
}

Tensor conv2d_max_pool(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, Conv2dOptions options) {
    const geometry g = check(x, w, bias, options);
    if (!pools_in_pass(g, x.dtype())) return max_pool2d(conv2d(x, w, bias, options), {2, 2}, {2, 2}, {0, 0});
    const std::optional<route> pinned = pinned_route(g, x.dtype(), options.backend);
    const float* b = bias ? floats_of(*bias, widened_other) : nullptr;
    const auto forward_on = [&](route r) { return pooled_forward(g, r, x, w, b); };
    const pooled_result out = run_on(pinned, "pooled forward", g, x.dtype(), forward_on);
    if (!conv_recorded(x, w, bias)) return out.y;
    const auto grads = [x, w, has_bias = bias.has_value(), g, pinned, out](const Tensor& dy) {
        const auto backward_on = [&](route r) { return pooled_backward(g, r, x, w, has_bias, dy, out); };
        return run_on(pinned, "pooled backward", g, x.dtype(), backward_on);
    };
    record_conv(out.y, x, w, bias, grads);
    return out.y;
}

} // namespace mixprec::autodiff
