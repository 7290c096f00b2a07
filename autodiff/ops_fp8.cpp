#include <mixprec/autodiff/ops_fp8.hpp>

#include <mixprec/autodiff/detail/as_rows.hpp>
#include <mixprec/autodiff/detail/fp8_cast.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/errors.hpp>
#include <mixprec/autodiff/tensor/kernels_elementwise.hpp>
#include <mixprec/autodiff/tensor/kernels_matmul.hpp>
#include <mixprec/autodiff/tensor/kernels_quantize.hpp>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::autodiff {
detail::Fp8Operand detail::fp8_operand(const Tensor& t, const Fp8Cast& how, const char* op, const char* what) {
    if (!how.scale) throw std::invalid_argument(std::string(op) + ": no scale function for the " + what);
    const float s = how.scale(kernels::amax(t));
    if (!(s > 0.0f) || !std::isfinite(s))
        throw std::invalid_argument(std::string(op) + ": the scale of the " + what +
                                    " must be positive and finite, got " + std::to_string(s));
    if (!how.observe) return {kernels::quantize(t, s, how.format, how.overflow, how.stochastic), 1.0f / s};
    RoundingStats stats;
    Tensor q;
    {
        // Nested in any recorder already running, which receives what this one saw when it ends.
        RoundingRecorder recorder({.writes = active_rounding_recorder() != nullptr});
        q = kernels::quantize(t, s, how.format, how.overflow, how.stochastic);
        stats = recorder.total();
    }
    how.observe(stats);
    return {std::move(q), 1.0f / s};
}

namespace {

detail::Fp8Operand cast(const Tensor& t, const Fp8Cast& how, const char* what) {
    return detail::fp8_operand(t, how, "dense_fp8", what);
}

} // namespace

Tensor dense_fp8(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Fp8DenseCasts& casts) {
    if (w.rank() != 2) throw shape_error("dense_fp8: weights " + w.shape().to_string() + " must have rank 2 (in, out)");
    const detail::Fp8Operand qx = cast(x, casts.input, "input"), qw = cast(w, casts.kernel, "kernel");
    const Tensor y = kernels::matmul(qx.q, qw.q, {.alpha = qx.inverse * qw.inverse, .out_dtype = x.dtype()},
                                     bias ? &*bias : nullptr);
    std::vector<const Tensor*> inputs{&x, &w};
    if (bias) inputs.push_back(&*bias);
    if (should_record(std::span<const Tensor* const>(inputs))) {
        const std::optional<Shape> bias_shape = bias ? std::optional<Shape>(bias->shape()) : std::nullopt;
        record(
            y, std::span<const Tensor* const>(inputs),
            [qx, qw, grad = casts.output_grad, x_dtype = x.dtype(), w_dtype = w.dtype(), bias_shape](const Tensor& dy) {
                Gradients g(bias_shape ? 3 : 2);
                if (bias_shape && gradient_needed(2)) g[2] = kernels::sum_to_shape(dy, *bias_shape);
                if (!gradient_needed(0) && !gradient_needed(1)) return g;
                const detail::Fp8Operand qg = cast(dy, grad, "output gradient");
                if (gradient_needed(0))
                    g[0] = kernels::matmul(
                        qg.q, qw.q, {.transpose_b = true, .alpha = qg.inverse * qw.inverse, .out_dtype = x_dtype});
                if (gradient_needed(1))
                    g[1] =
                        kernels::matmul(detail::as_rows(qx.q), detail::as_rows(qg.q),
                                        {.transpose_a = true, .alpha = qx.inverse * qg.inverse, .out_dtype = w_dtype});
                return g;
            });
    }
    return y;
}

} // namespace mixprec::autodiff
