/// MultiHeadSelfAttention: the fused q/k/v projection, the per-head scaled dot-product attention (heads
/// split with reshape and transpose, batched products over batch × heads) and the output projection.

#include <mixprec/models/layers/attention.hpp>

#include <mixprec/models/layers/detail/checks.hpp>
#include <mixprec/models/layers/detail/products.hpp>
#include <mixprec/models/layers/initializers.hpp>

#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_matmul.hpp>
#include <mixprec/autodiff/ops_shape.hpp>
#include <mixprec/autodiff/ops_softmax.hpp>

#include <cmath>
#include <stdexcept>

namespace mixprec::models {

namespace ad = mixprec::autodiff;

MultiHeadSelfAttention::MultiHeadSelfAttention(std::size_t heads, std::size_t key_dim)
    : heads_(heads), key_dim_(key_dim) {
    if (heads == 0) throw std::invalid_argument("MultiHeadSelfAttention: heads must be at least 1, got 0");
}

std::string MultiHeadSelfAttention::config() const {
    std::string c = "heads=" + std::to_string(heads_);
    c += ", key_dim=";
    c += key_dim_ == 0 ? std::string("width/heads") : std::to_string(key_dim_);
    return c;
}

std::vector<Variable> MultiHeadSelfAttention::variables() const { return variables_; }

Shape MultiHeadSelfAttention::do_build(const Shape& input_shape, Rng& init_rng) {
    detail::require_tokens(*this, input_shape);
    const std::string where = describe_layer(*this);
    const std::size_t width = input_shape[1];
    if (key_dim_ == 0 && width % heads_ != 0)
        throw ad::shape_error(where + ": width " + std::to_string(width) + " of examples " + input_shape.to_string() +
                              " is not a multiple of its " + std::to_string(heads_) +
                              " heads (give key_dim explicitly)");
    const std::size_t key_dim = key_dim_ != 0 ? key_dim_ : width / heads_;
    const std::size_t inner = heads_ * key_dim;
    variables_ = {
        make_variable(glorot_uniform(Shape{width, 3 * inner}, width, inner, init_rng), "qkv/kernel"),
        make_variable(zeros(Shape{3 * inner}), "qkv/bias"),
        make_variable(glorot_uniform(Shape{inner, width}, inner, width, init_rng), "output/kernel"),
        make_variable(zeros(Shape{width}), "output/bias"),
    };
    key_dim_ = key_dim;
    return input_shape;
}

Tensor MultiHeadSelfAttention::forward(const Tensor& x, const CallContext& call) {
    const std::size_t batch = x.shape()[0], tokens = x.shape()[1], heads = heads_, key_dim = key_dim_;
    const std::size_t inner = heads * key_dim;

    // (B, T, 3HK) -> (3, B, H, T, K): queries, keys and values, each (B·H, T, K) after the split.
    Tensor qkv = detail::product(x, variables_[0].read(), variables_[1].read(), policy(), fp8(), call, name() + "/qkv");
    qkv = ad::transpose(ad::reshape(qkv, Shape{batch, tokens, 3, heads, key_dim}), {2, 0, 3, 1, 4});
    const Shape per_head{batch * heads, tokens, key_dim};
    const Tensor q = ad::scale(ad::reshape(ad::slice(qkv, 0, 0, 1), per_head),
                               static_cast<float>(1.0 / std::sqrt(static_cast<double>(key_dim))));
    const Tensor k = ad::reshape(ad::slice(qkv, 0, 1, 2), per_head);
    const Tensor v = ad::reshape(ad::slice(qkv, 0, 2, 3), per_head);

    const Tensor weights = ad::softmax(ad::matmul(q, k, {.transpose_b = true}), -1); // (B·H, T, T)
    Tensor context = ad::matmul(weights, v);                                         // (B·H, T, K)

    // (B, H, T, K) -> (B, T, H, K): heads side by side, then the output projection.
    context = ad::transpose(ad::reshape(context, Shape{batch, heads, tokens, key_dim}), {0, 2, 1, 3});
    return detail::product(ad::reshape(context, Shape{batch, tokens, inner}), variables_[2].read(),
                           variables_[3].read(), policy(), fp8(), call, name() + "/output");
}

} // namespace mixprec::models
