#pragma once
// Internal: which route a convolution takes (oneDNN's primitives or im2col and a GEMM, pinned or measured),
// what oneDNN reads on it, and the tape records of the convolution ops. Included from .cpp files only.

#include <mixprec/autodiff/detail/conv/common.hpp>
#include <mixprec/autodiff/detail/conv/geometry.hpp>
#include <mixprec/autodiff/ops_conv.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/detail/conv_first_layer.hpp>
#include <mixprec/autodiff/tensor/detail/conv_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/fastest.hpp>
#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>
#include <mixprec/autodiff/tensor/isa.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mixprec::autodiff::detail::conv {

/// The route of a convolution: oneDNN's primitives (bfloat16 operands as they are where the level has
/// AVX512-BF16, every other dtype widened to float32), or im2col and a GEMM (OpenBLAS's or oneDNN's sgemm
/// on float32 operands). See ops_conv.hpp for which one `automatic` takes, and why.
enum class route { onednn_bf16, onednn_f32, im2col_bf16, im2col_f32, im2col_f32_onednn };

/// Whether ConvBackend::automatic takes oneDNN's primitives at the level in use: from avx2 up (see
/// ops_conv.hpp).
inline bool automatic_takes_onednn() { return isa() >= Isa::avx2; }

/// The route of `backend` (not measured; automatic as the process has it) for this shape and dtype.
inline route route_of(const geometry& g, Dtype dtype, ConvBackend backend) {
    if (backend == ConvBackend::automatic) backend = conv_backend();
    const bool bf16 = dtype == Dtype::bfloat16 && detail::onednn_bf16_available();
    // oneDNN wants every dimension nonzero; empty shapes stay on the im2col path
    const bool onednn =
        g.n > 0 && g.c > 0 && g.o > 0 && g.l() > 0 &&
        (backend == ConvBackend::onednn || (backend == ConvBackend::automatic && automatic_takes_onednn()));
    if (onednn) return bf16 ? route::onednn_bf16 : route::onednn_f32;
    if (bf16) return route::im2col_bf16;
    return backend == ConvBackend::im2col_onednn ? route::im2col_f32_onednn : route::im2col_f32;
}

/// The route of `backend` for this shape and dtype, or none when the route is to be measured.
inline std::optional<route> pinned_route(const geometry& g, Dtype dtype, ConvBackend backend) {
    if (backend == ConvBackend::measured ||
        (backend == ConvBackend::automatic && conv_backend() == ConvBackend::measured))
        return std::nullopt;
    return route_of(g, dtype, backend);
}

/// The shape of a first layer's pass (conv_first_layer.hpp) when the oneDNN route r takes it in place of
/// oneDNN's float32 primitive: on the route that hands oneDNN float32 operands (x and w of any dtype
/// widened, exactly), for one channel, 3 × 3, stride 1, no dilation or padding.
inline std::optional<detail::first_layer_shape> first_layer_pass(const geometry& g, route r) {
    const auto& o = g.opt;
    const detail::first_layer_shape s{g.n, g.h, g.w, g.o};
    if (r != route::onednn_f32 || g.c != 1 || g.kh != 3 || g.kw != 3 || o.stride != std::array<std::size_t, 2>{1, 1} ||
        o.dilation != std::array<std::size_t, 2>{1, 1} || o.padding != std::array<std::size_t, 2>{0, 0} ||
        !detail::first_layer_pass_applies(s))
        return std::nullopt;
    return s;
}

/// The route of the backward pass after a forward pass on r: r, except that below avx512 the oneDNN route
/// leaves a first layer's backward pass (first_layer_pass()'s shapes) to im2col and oneDNN's sgemm, where
/// oneDNN 2.6's weights pass (`jit:avx2`) pads the one input channel to a block of 8 (bench_layers'
/// `layer/conv2d_first/float32`, forward and backward, at `avx2`: 4.6 ms on oneDNN's passes, 2.4 on
/// im2col_onednn). The whole pass, dx too when wanted, so that dw has the same bits whether or not the tape
/// wants dx, and conv2d_max_pool those of max_pool2d(conv2d). From avx512 up oneDNN's own are faster.
inline route backward_route(const geometry& g, route r) {
    return isa() < Isa::avx512 && first_layer_pass(g, r) ? route::im2col_f32_onednn : r;
}

/// oneDNN's shape on route r for an input of dtype x_dtype: a bfloat16 x goes to oneDNN as it is on the
/// bfloat16 route, and on the float32 one from the avx512 level up, where the reorder into the primitives'
/// layout widens it in the same pass (onednn_input()). Below avx512 oneDNN 2.6 has only its reference
/// reorder from bfloat16 to float32 (`simple:any`: about 20 ms for the cnn's 128 × 32 × 13 × 13 input at
/// `avx2`, against 0.2 ms for mixprec's widening), so x is widened first there, as float16 always is.
inline detail::conv_shape onednn_shape(const geometry& g, route r, Dtype x_dtype) {
    const auto& o = g.opt;
    detail::conv_shape s{g.n,
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
    if (x_dtype == Dtype::bfloat16 && (r == route::onednn_bf16 || isa() >= Isa::avx512))
        s.x_holds = detail::conv_operands::bf16;
    return s;
}

/// What oneDNN reads for t on route r: t's own bfloat16 values, or float32 ones (widened into scratch
/// `slot` unless t is float32).
inline const void* onednn_operand(const Tensor& t, route r, std::size_t slot) {
    return r == route::onednn_bf16 ? t.raw() : floats_of(t, slot);
}

/// What oneDNN reads for the input x of shape s (onednn_shape() for x's dtype): x's own bfloat16 values
/// where s says x holds them, else float32 ones (widened into scratch `slot` unless x is float32).
inline const void* onednn_input(const Tensor& x, const detail::conv_shape& s, std::size_t slot) {
    return s.x_holds == detail::conv_operands::bf16 ? x.raw() : floats_of(x, slot);
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
inline bool conv_recorded(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias) {
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

} // namespace mixprec::autodiff::detail::conv
