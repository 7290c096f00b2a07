/// MultiHeadSelfAttention: the fused q/k/v projection, the per-head scaled dot-product attention
/// (autodiff::self_attention, on the heads as the projection packs them) and the output projection.

#include <mixprec/models/layers/attention.hpp>

#include <mixprec/models/layers/detail/checks.hpp>
#include <mixprec/models/layers/detail/products.hpp>
#include <mixprec/models/layers/initializers.hpp>

#include <mixprec/autodiff/ops_attention.hpp>

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
    const Tensor qkv =
        detail::product(x, variables_[0].read(), variables_[1].read(), policy(), fp8(), call, name() + "/qkv");
    const Tensor context = ad::self_attention(qkv, heads_, key_dim_); // (B, T, H·K)
    return detail::product(context, variables_[2].read(), variables_[3].read(), policy(), fp8(), call,
                           name() + "/output");
}

} // namespace mixprec::models
