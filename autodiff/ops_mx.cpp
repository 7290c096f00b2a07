#include <mixprec/autodiff/ops_mx.hpp>

#include <mixprec/autodiff/detail/as_rows.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/errors.hpp>
#include <mixprec/autodiff/tensor/kernels_elementwise.hpp>
#include <mixprec/autodiff/tensor/kernels_matmul.hpp>
#include <mixprec/autodiff/tensor/kernels_mx.hpp>

#include <vector>

namespace mixprec::autodiff {

Tensor dense_mxfp8(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const MxDenseFormats& formats) {
    if (w.rank() != 2)
        throw shape_error("dense_mxfp8: weights " + w.shape().to_string() + " must have rank 2 (in, out)");
    const Tensor y = kernels::matmul(kernels::mx_round(x, formats.input), kernels::mx_round_columns(w, formats.kernel),
                                     {.out_dtype = x.dtype()}, bias ? &*bias : nullptr);
    std::vector<const Tensor*> inputs{&x, &w};
    if (bias) inputs.push_back(&*bias);
    if (should_record(std::span<const Tensor* const>(inputs))) {
        const std::optional<Shape> bias_shape = bias ? std::optional<Shape>(bias->shape()) : std::nullopt;
        record(y, std::span<const Tensor* const>(inputs), [x, w, formats, bias_shape](const Tensor& dy) {
            Gradients g(bias_shape ? 3 : 2);
            if (bias_shape && gradient_needed(2)) g[2] = kernels::sum_to_shape(dy, *bias_shape);
            if (gradient_needed(0))
                g[0] = kernels::matmul(kernels::mx_round(dy, formats.output_grad), kernels::mx_round(w, formats.kernel),
                                       {.transpose_b = true, .out_dtype = x.dtype()});
            if (gradient_needed(1))
                g[1] = kernels::matmul(kernels::mx_round_columns(detail::as_rows(x), formats.input),
                                       kernels::mx_round_columns(detail::as_rows(dy), formats.output_grad),
                                       {.transpose_a = true, .out_dtype = w.dtype()});
            return g;
        });
    }
    return y;
}

} // namespace mixprec::autodiff
