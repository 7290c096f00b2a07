#include <mixprec/models/layers/detail/products.hpp>

#include <mixprec/amp/policy.hpp>
#include <mixprec/autodiff/ops_fp8.hpp>
#include <mixprec/autodiff/ops_matmul.hpp>
#include <mixprec/autodiff/ops_mx.hpp>
#include <mixprec/autodiff/ops_shape.hpp>

#include <span>
#include <vector>

namespace mixprec::models::detail {

Tensor product(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const amp::Policy& policy, bool fp8,
               const CallContext& context, const std::string& name) {
    const bool in_fp8 = fp8 && context.fp8 != nullptr && policy.fp8_products();
    const bool in_mx = fp8 && policy.mx_products();
    const auto rows_product = [&](const Tensor& rows) {
        if (in_fp8) return autodiff::dense_fp8(rows, w, bias, context.fp8->dense_casts(name));
        return in_mx ? autodiff::dense_mxfp8(rows, w, bias) : autodiff::dense(rows, w, bias);
    };
    if (x.rank() == 2) return rows_product(x);
    // (N, ..., in): the product runs on the rows (N·…, in), and the leading axes come back afterwards.
    const std::size_t in = x.shape()[x.rank() - 1];
    const std::size_t rows = in == 0 ? 0 : x.size() / in;
    const Tensor y = rows_product(autodiff::reshape(x, Shape{rows, in}));
    std::vector<std::size_t> out(x.shape().begin(), x.shape().end());
    out.back() = w.shape()[w.rank() - 1];
    return autodiff::reshape(y, Shape(std::span<const std::size_t>(out)));
}

} // namespace mixprec::models::detail
