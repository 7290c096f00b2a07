/// TransformerBlock, built on the autodiff ops (see transformer.hpp).

#include <mixprec/models/layers/transformer.hpp>

#include <mixprec/models/layers/detail/checks.hpp>
#include <mixprec/models/layers/detail/products.hpp>
#include <mixprec/models/layers/initializers.hpp>
#include <mixprec/models/layers/layers_core.hpp>

#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_matmul.hpp>
#include <mixprec/autodiff/ops_nn.hpp>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace mixprec::models {
namespace {

namespace ad = mixprec::autodiff;

/// Shortest-ish form for messages and configs: 0.1, 1e-06, nan.
std::string format_float(float v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

} // namespace

// ---- TransformerBlock -------------------------------------------------------------------------------

TransformerBlock::TransformerBlock(std::size_t heads, std::size_t mlp_width, float dropout, float epsilon)
    // heads = 0 is reported below under this layer's name rather than by the attention's constructor.
    : attention_(heads == 0 ? 1 : heads), mlp_width_(mlp_width), dropout_(dropout), epsilon_(epsilon) {
    if (heads == 0) throw std::invalid_argument("TransformerBlock: heads must be at least 1, got 0");
    if (mlp_width == 0) throw std::invalid_argument("TransformerBlock: mlp_width must be at least 1, got 0");
    if (!(dropout >= 0.0f && dropout < 1.0f))
        throw std::invalid_argument("TransformerBlock: dropout must be in [0, 1), got " + format_float(dropout));
    if (!(std::isfinite(epsilon) && epsilon > 0.0f))
        throw std::invalid_argument("TransformerBlock: epsilon must be finite and > 0, got " + format_float(epsilon));
}

std::string TransformerBlock::config() const {
    std::string c = "heads=" + std::to_string(heads());
    c += ", mlp_width=" + std::to_string(mlp_width_);
    c += ", dropout=" + format_float(dropout_);
    return c;
}

std::vector<Variable> TransformerBlock::variables() const {
    if (norm1_.empty()) return {};
    std::vector<Variable> all = norm1_;
    for (const Variable& v : attention_.variables()) all.push_back(v);
    all.insert(all.end(), rest_.begin(), rest_.end());
    return all;
}

Shape TransformerBlock::do_build(const Shape& input_shape, Rng& init_rng) {
    detail::require_tokens(*this, input_shape);
    const std::size_t width = input_shape[1];
    if (width % heads() != 0)
        throw ad::shape_error(describe_layer(*this) + ": width " + std::to_string(width) + " of examples " +
                              input_shape.to_string() + " is not a multiple of its " + std::to_string(heads()) +
                              " heads");
    MultiHeadSelfAttention attention = attention_; // built on a copy: a failed build leaves this layer as it was
    attention.set_name(name() + "/attention");
    attention.set_policy(policy());
    attention.build(input_shape, init_rng);
    const Shape d{width}, m{mlp_width_};
    norm1_ = {make_variable(ones(d), "norm1/gamma"), make_variable(zeros(d), "norm1/beta")};
    rest_ = {make_variable(ones(d), "norm2/gamma"),
             make_variable(zeros(d), "norm2/beta"),
             make_variable(glorot_uniform(Shape{width, mlp_width_}, width, mlp_width_, init_rng), "mlp1/kernel"),
             make_variable(zeros(m), "mlp1/bias"),
             make_variable(glorot_uniform(Shape{mlp_width_, width}, mlp_width_, width, init_rng), "mlp2/kernel"),
             make_variable(zeros(d), "mlp2/bias")};
    attention_ = std::move(attention);
    return input_shape;
}

Tensor TransformerBlock::drop(const Tensor& x, const CallContext& context) const {
    if (!context.training || dropout_ == 0.0f) return x;
    if (context.dropout_rng == nullptr)
        throw std::logic_error(describe_layer(*this) + " is called with training = true and dropout " +
                               format_float(dropout_) + " but no CallContext::dropout_rng");
    return ad::dropout(x, dropout_, *context.dropout_rng, true);
}

Tensor TransformerBlock::forward(const Tensor& x, const CallContext& context) {
    attention_.set_fp8(fp8()); // the block decides for the products inside it
    Tensor h = ad::layer_norm(x, norm1_[0].read(), norm1_[1].read(), epsilon_);
    const Tensor y = ad::add(x, drop(attention_(h, context), context));
    h = ad::layer_norm(y, rest_[0].read(), rest_[1].read(), epsilon_);
    h = ad::gelu(detail::product(h, rest_[2].read(), rest_[3].read(), policy(), fp8(), context, name() + "/mlp1"));
    h = detail::product(h, rest_[4].read(), rest_[5].read(), policy(), fp8(), context, name() + "/mlp2");
    return ad::add(y, drop(h, context));
}

} // namespace mixprec::models
