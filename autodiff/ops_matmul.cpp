#include <mixprec/autodiff/ops_matmul.hpp>

#include <mixprec/autodiff/detail/as_rows.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/kernels_elementwise.hpp>

#include <vector>

namespace mixprec::autodiff {
namespace {

/// Swaps the last two axes (rank 3), in the tensor's dtype (a copy: values unchanged).
Tensor transpose_last2(const Tensor& t) {
    const std::size_t batch = t.shape()[0], rows = t.shape()[1], cols = t.shape()[2];
    const std::vector<float> v = t.to_floats();
    std::vector<float> out(v.size());
    for (std::size_t b = 0; b < batch; ++b)
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) out[(b * cols + j) * rows + i] = v[(b * rows + i) * cols + j];
    return Tensor::from_floats(Shape{batch, cols, rows}, out, t.dtype());
}

Tensor grad_a(const Tensor& dc, const Tensor& a, const Tensor& b, MatmulOptions o) {
    if (!o.transpose_a) // dA = dC op(B)ᵀ
        return kernels::matmul(dc, b, {.transpose_b = !o.transpose_b, .backend = o.backend});
    if (b.rank() == a.rank()) // dA = op(B) dCᵀ
        return kernels::matmul(b, dc, {.transpose_a = o.transpose_b, .transpose_b = true, .backend = o.backend});
    // a batched and transposed, b shared: dA = (dC op(B)ᵀ)ᵀ per batch
    return transpose_last2(kernels::matmul(dc, b, {.transpose_b = !o.transpose_b, .backend = o.backend}));
}

Tensor grad_b(const Tensor& dc, const Tensor& a, const Tensor& b, MatmulOptions o) {
    if (b.rank() == 2 && a.rank() == 3) { // one b for every batch: sum the per-batch gradients
        const Tensor per_batch =
            o.transpose_b
                ? kernels::matmul(dc, a, {.transpose_a = true, .transpose_b = o.transpose_a, .backend = o.backend})
                : kernels::matmul(a, dc, {.transpose_a = !o.transpose_a, .backend = o.backend});
        return kernels::sum_to_shape(per_batch, b.shape());
    }
    if (!o.transpose_b) // dB = op(A)ᵀ dC
        return kernels::matmul(a, dc, {.transpose_a = !o.transpose_a, .backend = o.backend});
    return kernels::matmul(dc, a,
                           {.transpose_a = true, .transpose_b = o.transpose_a, .backend = o.backend}); // dCᵀ op(A)
}

} // namespace

Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options) {
    Tensor c = kernels::matmul(a, b, options);
    if (should_record({&a, &b}))
        record(c, {&a, &b}, [a, b, options](const Tensor& dc) {
            Gradients g(2);
            if (gradient_needed(0)) g[0] = grad_a(dc, a, b, options);
            if (gradient_needed(1)) g[1] = grad_b(dc, a, b, options);
            return g;
        });
    return c;
}

} // namespace mixprec::autodiff

namespace mixprec::autodiff {

Tensor dense(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias) {
    if (w.rank() != 2) throw shape_error("dense: weights " + w.shape().to_string() + " must have rank 2 (in, out)");
    Tensor y = kernels::matmul(x, w, {}, bias ? &*bias : nullptr);
    std::vector<const Tensor*> inputs{&x, &w};
    if (bias) inputs.push_back(&*bias);
    if (should_record(std::span<const Tensor* const>(inputs))) {
        const std::optional<Shape> bias_shape = bias ? std::optional<Shape>(bias->shape()) : std::nullopt;
        record(y, std::span<const Tensor* const>(inputs), [x, w, bias_shape](const Tensor& dy) {
            // dw = xᵀ dy over all leading axes at once: x and dy seen as matrices of rows (one product,
            // summed in float32 and rounded once, rather than one product per batch and a sum of those).
            Gradients g(bias_shape ? 3 : 2);
            if (gradient_needed(0)) g[0] = grad_a(dy, x, w, {});
            if (gradient_needed(1))
                g[1] = kernels::matmul(detail::as_rows(x), detail::as_rows(dy), {.transpose_a = true});
            if (bias_shape && gradient_needed(2)) g[2] = kernels::sum_to_shape(dy, *bias_shape);
            return g;
        });
    }
    return y;
}

} // namespace mixprec::autodiff
