#include <mixprec/autodiff/ops_conv.hpp>

#include <mixprec/autodiff/detail/conv/common.hpp>
#include <mixprec/autodiff/detail/conv/geometry.hpp>
#include <mixprec/autodiff/detail/conv/im2col.hpp>
#include <mixprec/autodiff/detail/conv/routes.hpp>
#include <mixprec/autodiff/detail/fp8_cast.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/conv_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace mixprec::autodiff {
using namespace detail::conv;
namespace {

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
        if (const auto first = first_layer_pass(g, r); first && alpha == 1.0f) { // oneDNN's bits, faster
            detail::first_layer_forward(*first, floats_of(x, widened_x), floats_of(w, widened_w), b, wide);
        } else {
            const detail::conv_shape s = onednn_shape(g, r, x.dtype());
            run = detail::onednn_conv_forward(s, onednn_input(x, s, widened_x), onednn_operand(w, r, widened_w),
                                              alpha == 1.0f ? b : nullptr, wide);
        }
        if (alpha == 1.0f && !g.opt.relu && y.dtype() == Dtype::float32) break; // y is written
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
        im2col_forward(g, x, w.data<bfloat16>().data(), b, alpha, false, images);
        break;
    }
    case route::im2col_f32:
    case route::im2col_f32_onednn: {
        into_tensor images{y, relu_d, g.o * g.l()};
        im2col_forward(g, x, floats_of(w, widened_w), b, alpha, r == route::im2col_f32_onednn, images);
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
/// The backward pass on route r for the output gradient dy: {dx (when the tape wants it) in dx_dtype, dw
/// in dw_dtype, and dbias from dy when `bias`}, the sums of dx and dw multiplied by dx_alpha and dw_alpha
/// before their one rounding. With `relu_d` (the ReLU's derivative, when the forward applied one), dy is
/// first multiplied by it. forward_run: the forward's run on a oneDNN route (run_forward), or 0.
Gradients run_backward(const geometry& g, route r, const Tensor& x, const Tensor& w, const Tensor& dy, bool bias,
                       Dtype dx_dtype, Dtype dw_dtype, const Tensor* relu_d, std::uint64_t forward_run,
                       float dx_alpha = 1.0f, float dw_alpha = 1.0f) {
    gradient_sums sums(g, x, w, bias, dx_dtype, dw_dtype);
    const conv_grads d = sums.grads(dx_alpha);
    const route on = backward_route(g, r); // a first layer's below avx512: im2col (routes.hpp)
    switch (on) {
    case route::onednn_bf16:
    case route::onednn_f32:
        onednn_backward(g, d, [&](float* dx) {
            const Tensor dz = relu_d ? relu_masked(dy, *relu_d) : dy;
            const detail::conv_shape s = onednn_shape(g, on, x.dtype());
            detail::onednn_conv_backward(
                s, [&] { return onednn_input(x, s, widened_x); }, forward_run, onednn_operand(w, on, widened_w),
                onednn_operand(dz, on, widened_other), dx, d.dw, d.db);
        });
        break;
    case route::im2col_bf16:
        im2col_backward(g, x, w.data<bfloat16>().data(), from_tensor<bfloat16>{g, dy, relu_d}, d, false);
        break;
    case route::im2col_f32:
    case route::im2col_f32_onednn:
        im2col_backward(g, x, floats_of(w, widened_w), from_tensor<float>{g, dy, relu_d}, d,
                        on == route::im2col_f32_onednn);
        break;
    }
    if (dw_alpha != 1.0f)
        for (std::size_t i = 0; i < w.size(); ++i) d.dw[i] *= dw_alpha;
    return sums.finish();
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

} // namespace mixprec::autodiff
