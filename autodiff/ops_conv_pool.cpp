#include <mixprec/autodiff/ops_conv.hpp>

#include <mixprec/autodiff/detail/blocked.hpp>
#include <mixprec/autodiff/detail/conv/common.hpp>
#include <mixprec/autodiff/detail/conv/geometry.hpp>
#include <mixprec/autodiff/detail/conv/im2col.hpp>
#include <mixprec/autodiff/detail/conv/routes.hpp>
#include <mixprec/autodiff/detail/pool_2x2.hpp>
#include <mixprec/autodiff/detail/pooled_weights.hpp>
#include <mixprec/autodiff/ops_pool.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/conv_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

namespace mixprec::autodiff {
using namespace detail::conv;
namespace {

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
    /// it is read (float32, and bfloat16, whose rounding is a few integer steps); other dtypes through the
    /// ReLU and rounded in passes before (float16 by the conversion instructions where the level has them).
    void onednn(std::size_t n, float* v, std::size_t block) {
        const Dtype dtype = y.dtype();
        if (block && (dtype == Dtype::float32 || dtype == Dtype::bfloat16)) {
            const auto with = [&]<class S>(S) {
                if (g.opt.relu) return pool_blocked(n, v, block, [](float x) { return as_stored<S, true>(x); });
                pool_blocked(n, v, block, [](float x) { return as_stored<S, false>(x); });
            };
            if (dtype == Dtype::float32) return with(0.0f);
            return with(bfloat16::spec{});
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
    /// Image n's windows from v, laid out by `block` (8 or 16 channels a block, or channels last: block =
    /// g.o, a multiple of 16), each value taken as value(v[…]).
    template <class Value>
    void pool_blocked(std::size_t n, const float* v, std::size_t block, Value value) {
        pool(n, [&](float* pooled_values) {
            const std::size_t l = g.l(), out = (g.ho / 2) * (g.wo / 2);
            const auto first = static_cast<std::uint32_t>(n * g.o * l);
            // B channels at a time, the first of channel o at v + o · at_o
            const auto blocks = [&]<std::size_t B>(std::integral_constant<std::size_t, B>, std::size_t at_o) {
                for (std::size_t o = 0; o < g.o; o += B)
                    detail::argmax_2x2_blocked<B>(v + o * at_o, block, g.ho, g.wo, std::min(B, g.o - o),
                                                  first + static_cast<std::uint32_t>(o * l),
                                                  static_cast<std::uint32_t>(l), idx + (n * g.o + o) * out,
                                                  pooled_values + o * out, value);
            };
            if (block == 16) return blocks(std::integral_constant<std::size_t, 16>{}, l);
            if (block == 8) return blocks(std::integral_constant<std::size_t, 8>{}, l);
            blocks(std::integral_constant<std::size_t, 16>{}, 1); // channels last
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

/// The output gradient of conv2d_max_pool's convolution, image by image (a source for im2col_backward(), and for
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
        if (const auto first = first_layer_pass(g, r); first && detail::first_layer_pools_to(out.y.dtype())) {
            // oneDNN's bits, rounded and pooled in the same pass (conv_first_layer.hpp)
            detail::first_layer_pooled(*first, floats_of(x, widened_x), floats_of(w, widened_w), b, g.opt.relu,
                                       out.y.dtype(), out.y.raw(), out.idx.get());
            break;
        }
        {
            const detail::conv_shape s = onednn_shape(g, r, x.dtype());
            out.onednn_run = detail::onednn_conv_forward_images(
                s, onednn_input(x, s, widened_x), onednn_operand(w, r, widened_w), b,
                [&](std::size_t n, float* v, std::size_t block) { images.onednn(n, v, block); });
        }
        break;
    case route::im2col_bf16:
        im2col_forward(g, x, w.data<bfloat16>().data(), b, 1.0f, false, images);
        break;
    case route::im2col_f32:
    case route::im2col_f32_onednn:
        im2col_forward(g, x, floats_of(w, widened_w), b, 1.0f, r == route::im2col_f32_onednn, images);
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
    // registers of 16 lanes (lanes.hpp), or of 8: the filters' sums in passes of 8 lanes
    const Isa level = isa();
    const bool wide = level >= Isa::avx512, halves = !wide && level >= Isa::avx2;
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
            // Wide: gather_windows and pooled_weights on 16 lanes a register; N: pooled_weights' lanes a pass
            const auto pass = [&]<bool Wide, std::size_t N>(std::bool_constant<Wide>,
                                                            std::integral_constant<std::size_t, N>) {
                detail::gather_windows<Wide>(wg, split, gathered);
                constexpr bool whole = Wide || N == 8; // the registers hold a pass's lanes
                float* db = lanes + g.o * taps * L;
                if (g.c == 1 && g.kh == 3 && g.kw == 3) {
                    detail::pooled_weights<1, 3, 3, whole, N>(wg, gathered, dv, idx, base, lanes, db);
                } else {
                    detail::pooled_weights<0, 0, 0, whole, N>(wg, gathered, dv, idx, base, lanes, db);
                }
            };
            detail::vectorized([&] {
                if (wide) {
                    pass(std::true_type{}, std::integral_constant<std::size_t, L>{});
                } else if (halves) {
                    pass(std::false_type{}, std::integral_constant<std::size_t, 8>{});
                } else {
                    pass(std::false_type{}, std::integral_constant<std::size_t, L>{});
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

/// conv2d_max_pool's backward pass on a oneDNN route (r) into d: dy made image by image from `source`, and
/// dx rounded image by image as oneDNN hands it over (d.dx_alpha is 1 here), an image in blocks of 16
/// channels or channels last first laid out plain where it is stored (float32) or rounded from.
template <class Source>
void pooled_backward_onednn(const geometry& g, route r, const Tensor& x, const Tensor& w, const Source& source,
                            std::uint64_t forward_run, conv_grads d) {
    const std::size_t image = g.c * g.h * g.w;
    std::optional<RoundingBatch> rounding;
    if (d.dx && d.dx->dtype() != Dtype::float32) rounding.emplace(*d.dx);
    const detail::conv_image_sink dx_image = [&](std::size_t n, float* v, std::size_t block) {
        float* values = v;
        if (block) { // 16, or channels last: laid out plain where dx is stored (float32) or rounded from
            values = workspace(*d.dx, n * image, image, false);
            detail::vectorized([&] { detail::unblock_16(v, g.c, g.h * g.w, block, values); });
        } else if (!rounding) {
            std::copy_n(v, image, static_cast<float*>(d.dx->raw()) + n * image);
        }
        if (rounding) commit(*d.dx, n * image, values, image, *rounding);
    };
    const detail::conv_shape s = onednn_shape(g, r, x.dtype());
    detail::onednn_conv_backward_images(
        s, [&] { return onednn_input(x, s, widened_x); }, forward_run, onednn_operand(w, r, widened_w),
        [&](std::size_t n, void* dst, std::size_t block) {
            const auto put = [&]<class T>(T) {
                if (block) return source(T{}).put_blocked(n, static_cast<T*>(dst), block);
                source(T{}).put(n, static_cast<T*>(dst), g.l(), nullptr);
            };
            if (r == route::onednn_bf16) return put(bfloat16{});
            put(0.0f);
        },
        d.dx ? &dx_image : nullptr, d.dw, d.db);
}

/// conv2d_max_pool's backward pass on route r for the pooled outputs' gradient dy: {dx (when the tape
/// wants it), dw, and dbias when `bias`}.
Gradients pooled_backward(const geometry& g, route r, const Tensor& x, const Tensor& w, bool bias, const Tensor& dy,
                          const pooled_result& forward_result) {
    gradient_sums sums(g, x, w, bias, x.dtype(), w.dtype());
    const conv_grads d = sums.grads(1.0f);
    const auto source = [&]<class T>(T) { return from_pooled<T>{g, dy, forward_result.y, forward_result.idx.get()}; };
    if (windows_pass_applies(g, d) && weights_from_windows(g, x, source(0.0f), d)) return sums.finish();
    const route on = backward_route(g, r); // a first layer's below avx512: im2col (routes.hpp)
    switch (on) {
    case route::onednn_bf16:
    case route::onednn_f32:
        pooled_backward_onednn(g, on, x, w, source, forward_result.onednn_run, d);
        break;
    case route::im2col_bf16:
        im2col_backward(g, x, w.data<bfloat16>().data(), source(bfloat16{}), d, false);
        break;
    case route::im2col_f32:
    case route::im2col_f32_onednn:
        im2col_backward(g, x, floats_of(w, widened_w), source(0.0f), d, on == route::im2col_f32_onednn);
        break;
    }
    return sums.finish();
}

} // namespace

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
