#include <mixprec/autodiff/ops_nn.hpp>

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::autodiff {

namespace {

/// dst[0, n) = elements [at, at + n) of t, widened exactly to float32.
void floats_into(const Tensor& t, std::size_t at, std::size_t n, float* dst) {
    if (t.dtype() == Dtype::float32) {
        std::copy_n(static_cast<const float*>(t.raw()) + at, n, dst);
    } else {
        widen(kernels::detail::bytes_at(t, at), t.dtype(), dst, n);
    }
}

/// Rows of a layer norm handled together: their sums' chains interleave (a row's sum is one chain of
/// dependent adds; one row at a time waits on each add).
constexpr std::size_t rows_at_once = 8;

/// sums[i] = Σ_j term(i, j), j from 0 to d − 1 in order, for rows i < n ≤ rows_at_once: each row summed
/// as a loop over that row alone sums it, the rows side by side.
template <class Term>
void row_sums(std::size_t n, std::size_t d, float* sums, Term term) {
    std::fill_n(sums, n, 0.0f);
    if (n == rows_at_once) {
        for (std::size_t j = 0; j < d; ++j)
            for (std::size_t i = 0; i < rows_at_once; ++i) sums[i] += term(i, j);
    } else {
        for (std::size_t j = 0; j < d; ++j)
            for (std::size_t i = 0; i < n; ++i) sums[i] += term(i, j);
    }
}

} // namespace

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon) {
    if (x.rank() == 0) throw shape_error("layer_norm: x must have at least one axis, got shape ()");
    const std::size_t d = x.shape()[x.rank() - 1], rows = d == 0 ? 0 : x.size() / d;
    const Shape param{d};
    if (gamma.shape() != param || beta.shape() != param)
        throw shape_error("layer_norm: gamma " + gamma.shape().to_string() + " and beta " + beta.shape().to_string() +
                          " must have shape " + param.to_string() + " for x " + x.shape().to_string());
    check_same_dtype(x, gamma, "layer_norm (x, gamma)");
    check_same_dtype(x, beta, "layer_norm (x, beta)");

    // Rows are independent: blocks of them run on every thread, each row computed as one thread would,
    // in the copy compiled for the level in use (isa_kernels.hpp). xhat (the normalized rows) and 1/σ per
    // row are kept for the backward pass. xhat is left uninitialized (the blocks write all of it): zeroing
    // it first was a pass on one thread.
    std::shared_ptr<float[]> xhat = std::make_shared_for_overwrite<float[]>(x.size());
    auto rstd = std::make_shared<std::vector<float>>(rows);
    const std::vector<float> g = gamma.to_floats(), b = beta.to_floats();
    // rows [r0, r1): xr holds them widened and becomes their xhat; o gets their result in float32
    const auto normalize = [&](float* xr, float* o, std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; r += rows_at_once) {
            const std::size_t n = std::min(rows_at_once, r1 - r), at = (r - r0) * d;
            std::array<float, rows_at_once> mean, var;
            row_sums(n, d, mean.data(), [&](std::size_t i, std::size_t j) { return xr[at + i * d + j]; });
            for (std::size_t i = 0; i < n; ++i) mean[i] /= static_cast<float>(d);
            row_sums(n, d, var.data(), [&](std::size_t i, std::size_t j) {
                const float c = xr[at + i * d + j] - mean[i];
                return c * c;
            });
            for (std::size_t i = 0; i < n; ++i) {
                const float rs = (*rstd)[r + i] = 1.0f / std::sqrt(var[i] / static_cast<float>(d) + epsilon);
                float* xi = xr + at + i * d;
                float* oi = o + at + i * d;
                for (std::size_t j = 0; j < d; ++j) {
                    xi[j] = (xi[j] - mean[i]) * rs;
                    oi[j] = g[j] * xi[j] + b[j];
                }
            }
        }
    };
    Tensor y = Tensor::uninitialized(x.shape(), x.dtype());
    {
        RoundingBatch rounding(y);
        detail::split_blocks(rows, d, [&](std::size_t r0, std::size_t r1) {
            thread_local std::vector<float> out;
            float* xr = xhat.get() + r0 * d;
            floats_into(x, r0 * d, (r1 - r0) * d, xr);
            float* o = kernels::detail::result_at(y, r0 * d, (r1 - r0) * d, out);
            detail::vectorized([&] { normalize(xr, o, r0, r1); });
            kernels::detail::store(o, y, r0 * d, (r1 - r0) * d, rounding);
        });
    }
    if (should_record({&x, &gamma, &beta}))
        record(y, {&x, &gamma, &beta}, [gamma, xhat, rstd, rows, d, shape = x.shape()](const Tensor& dy) {
            const std::vector<float> gs = gamma.to_floats();
            const Dtype t = gamma.dtype();
            const auto dys = std::make_unique_for_overwrite<float[]>(dy.size()); // every block writes its rows
            // rows [r0, r1) of dx in float32 into o, from their dy (dyr) and xhat (xr)
            const auto rows_of_dx = [&](const float* dyr, const float* xr, float* o, std::size_t r0, std::size_t r1) {
                for (std::size_t r = r0; r < r1; r += rows_at_once) {
                    const std::size_t n = std::min(rows_at_once, r1 - r), at = (r - r0) * d;
                    std::array<float, rows_at_once> mean_g, mean_gx;
                    row_sums(n, d, mean_g.data(),
                             [&](std::size_t i, std::size_t j) { return gs[j] * dyr[at + i * d + j]; });
                    row_sums(n, d, mean_gx.data(), [&](std::size_t i, std::size_t j) {
                        return gs[j] * dyr[at + i * d + j] * xr[at + i * d + j];
                    });
                    for (std::size_t i = 0; i < n; ++i) {
                        const float mg = mean_g[i] / static_cast<float>(d), mgx = mean_gx[i] / static_cast<float>(d);
                        const float rs = (*rstd)[r + i];
                        const float *dyi = dyr + at + i * d, *xi = xr + at + i * d;
                        float* oi = o + at + i * d;
                        for (std::size_t j = 0; j < d; ++j) oi[j] = rs * (gs[j] * dyi[j] - mg - xi[j] * mgx);
                    }
                }
            };
            Tensor dx = Tensor::uninitialized(shape, t);
            {
                RoundingBatch rounding(dx);
                detail::split_blocks(rows, d, [&](std::size_t r0, std::size_t r1) {
                    thread_local std::vector<float> out;
                    float* dyr = dys.get() + r0 * d;
                    floats_into(dy, r0 * d, (r1 - r0) * d, dyr);
                    float* o = kernels::detail::result_at(dx, r0 * d, (r1 - r0) * d, out);
                    detail::vectorized([&] { rows_of_dx(dyr, xhat.get() + r0 * d, o, r0, r1); });
                    kernels::detail::store(o, dx, r0 * d, (r1 - r0) * d, rounding);
                });
            }
            // dgamma and dbeta sum over the rows in order: split by columns instead.
            std::vector<float> dgamma(d, 0.0f), dbeta(d, 0.0f);
            detail::split(d, 16, [&](std::size_t j0, std::size_t j1) {
                detail::vectorized([&] {
                    for (std::size_t r = 0; r < rows; ++r) {
                        const float* dyr = dys.get() + r * d;
                        const float* xr = xhat.get() + r * d;
                        for (std::size_t j = j0; j < j1; ++j) {
                            dgamma[j] += dyr[j] * xr[j];
                            dbeta[j] += dyr[j];
                        }
                    }
                });
            });
            return Gradients{std::move(dx), Tensor::from_floats(Shape{d}, dgamma, t),
                             Tensor::from_floats(Shape{d}, dbeta, t)};
        });
    return y;
}

Tensor embedding(const Tensor& table, std::span<const std::int32_t> ids, const Shape& ids_shape) {
    if (table.rank() != 2)
        throw shape_error("embedding: table must have shape (vocab, dim), got " + table.shape().to_string());
    if (ids.size() != ids_shape.elements())
        throw shape_error("embedding: " + std::to_string(ids.size()) + " ids for ids shape " + ids_shape.to_string() +
                          ", which holds " + std::to_string(ids_shape.elements()));
    if (ids_shape.rank() == Shape::max_rank)
        throw shape_error("embedding: ids shape " + ids_shape.to_string() + " leaves no room for the embedding axis");
    const std::size_t vocab = table.shape()[0], dim = table.shape()[1];
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= vocab)
            throw std::invalid_argument("embedding: id at position " + std::to_string(i) + " is " +
                                        std::to_string(ids[i]) + ", outside [0, " + std::to_string(vocab) + ")");

    std::array<std::size_t, Shape::max_rank> dims{};
    std::copy(ids_shape.begin(), ids_shape.end(), dims.begin());
    dims[ids_shape.rank()] = dim;
    Tensor y(Shape(std::span<const std::size_t>(dims.data(), ids_shape.rank() + 1)), table.dtype());
    const std::size_t row_bytes = dim * size_of(table.dtype());
    for (std::size_t i = 0; i < ids.size() && row_bytes != 0; ++i)
        std::memcpy(kernels::detail::bytes_at(y, i * dim),
                    kernels::detail::bytes_at(table, static_cast<std::size_t>(ids[i]) * dim), row_bytes);

    if (should_record({&table}))
        record(y, {&table},
               [ids = std::vector<std::int32_t>(ids.begin(), ids.end()), vocab, dim,
                dtype = table.dtype()](const Tensor& dy) {
                   const std::vector<float> g = dy.to_floats();
                   std::vector<float> acc(vocab * dim, 0.0f);
                   for (std::size_t i = 0; i < ids.size(); ++i) {
                       float* row = acc.data() + static_cast<std::size_t>(ids[i]) * dim;
                       for (std::size_t j = 0; j < dim; ++j) row[j] += g[i * dim + j];
                   }
                   return Gradients{Tensor::from_floats(Shape{vocab, dim}, acc, dtype)};
               });
    return y;
}

Tensor dropout(const Tensor& x, float rate, Rng& rng, bool training) {
    if (!(rate >= 0.0f && rate < 1.0f))
        throw std::invalid_argument("dropout: rate must be in [0, 1), got " + std::to_string(rate));
    if (!training || rate == 0.0f) return x;
    const float keep_scale = 1.0f / (1.0f - rate);
    std::vector<std::uint8_t> mask(x.size());
    for (auto& m : mask) m = rng.uniform() >= rate;
    std::vector<float> v = x.to_floats();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] *= mask[i] ? keep_scale : 0.0f;
    Tensor y = Tensor::from_floats(x.shape(), v, x.dtype());
    if (should_record({&x}))
        record(y, {&x}, [mask = std::move(mask), keep_scale](const Tensor& dy) {
            std::vector<float> g = dy.to_floats();
            for (std::size_t i = 0; i < g.size(); ++i) g[i] *= mask[i] ? keep_scale : 0.0f;
            return Gradients{Tensor::from_floats(dy.shape(), g, dy.dtype())};
        });
    return y;
}

} // namespace mixprec::autodiff
