#pragma once
// Internal: the im2col route of the convolution ops: each thread's images unfolded into a column matrix a
// chunk at a time and multiplied by OpenBLAS's or oneDNN's GEMM, forward and backward. Included from .cpp
// files only (OpenMP).

#include <mixprec/autodiff/detail/conv/common.hpp>
#include <mixprec/autodiff/detail/conv/geometry.hpp>
#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

namespace mixprec::autodiff::detail::conv {

/// Column-matrix elements per chunk of a thread's images (1 MiB of float32): the columns im2col writes
/// are still in that core's L2 when the GEMM reads them, and the column gradient when col2im does.
constexpr std::size_t chunk_elements = std::size_t{1} << 18;

/// Output positions [lo, hi) along an axis whose input index pos·s + offset − pad lies in [0, in).
inline std::pair<std::size_t, std::size_t> valid(std::size_t out, std::size_t in, std::size_t s, std::size_t pad,
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
inline void col2im(const geometry& g, const float* cols, std::size_t row, std::size_t b, float* dx) {
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

/// Images per chunk of the range [lo, hi), balanced so every chunk has about the same size.
inline std::size_t chunk_size(const geometry& g, std::size_t lo, std::size_t hi) {
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

/// The im2col route's forward pass: each thread unfolds its images a chunk at a time and multiplies them
/// by w, then hands image n's results, alpha · (w ⊛ x) + bias through the ReLU when fused, to `images`:
/// values(n) gives room for them, done(n, values) takes them.
template <class T, class Images>
void im2col_forward(const geometry& g, const Tensor& x, const T* w, const float* bias, float alpha, bool onednn_sgemm,
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

/// The im2col route's backward pass into d: each chunk's output gradient from `source` (put(n, dst, row,
/// db), which sums dbias on the way), dw += dY · colsᵀ (each thread's sums in a slice of its own, the
/// slices added in thread order), and with d.dx, dx = d.dx_alpha · col2im(wᵀ · dY), rounded once.
template <class T, class Source>
void im2col_backward(const geometry& g, const Tensor& x, const T* w, const Source& source, conv_grads d,
                     bool onednn_sgemm) {
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

} // namespace mixprec::autodiff::detail::conv
