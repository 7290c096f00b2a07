/// Patches, PositionEmbedding, TransformerBlock and GlobalAveragePooling1D, built on the autodiff ops.

#include <mixprec/models/layers/transformer.hpp>

#include <mixprec/models/layers/initializers.hpp>

#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_matmul.hpp>
#include <mixprec/autodiff/ops_nn.hpp>
#include <mixprec/autodiff/ops_reduce.hpp>
#include <mixprec/autodiff/ops_shape.hpp>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace mixprec::models {
namespace {

namespace ad = mixprec::autodiff;

/// "layer 'block' (TransformerBlock)", or "TransformerBlock layer" when unnamed: for messages.
std::string describe(const Layer& layer) {
    if (layer.name().empty()) return layer.kind() + " layer";
    std::string s = "layer '";
    s += layer.name();
    s += "' (" + layer.kind() + ")";
    return s;
}

/// shape_error unless `shape` is (T, D) with T, D ≥ 1.
void require_tokens(const Layer& layer, const Shape& shape) {
    if (shape.rank() != 2 || shape.elements() == 0)
        throw ad::shape_error(describe(layer) + " expects examples of shape (tokens, width) with both ≥ 1, got " +
                              shape.to_string());
}

/// Shortest-ish form for messages and configs: 0.1, 1e-06, nan.
std::string format_float(float v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

} // namespace

// ---- Patches ----------------------------------------------------------------------------------------

Patches::Patches(std::size_t patch) : patch_(patch) {
    if (patch == 0) throw std::invalid_argument("Patches: the patch size must be at least 1, got 0");
}

std::string Patches::config() const { return "patch=" + std::to_string(patch_); }

Shape Patches::do_build(const Shape& input_shape, Rng&) {
    const std::size_t p = patch_;
    if (input_shape.rank() != 3 || input_shape.elements() == 0 || input_shape[1] % p != 0 ||
        input_shape[2] % p != 0)
        throw ad::shape_error(describe(*this) + " expects images (channels, height, width) with height and width " +
                              "non-zero multiples of the patch size " + std::to_string(p) + ", got " +
                              input_shape.to_string());
    const std::size_t rows = input_shape[1] / p, cols = input_shape[2] / p;
    return Shape{rows * cols, input_shape[0] * p * p};
}

Tensor Patches::forward(const Tensor& x, const CallContext&) {
    const std::size_t batch = x.shape()[0], channels = x.shape()[1], p = patch_;
    const std::size_t rows = x.shape()[2] / p, cols = x.shape()[3] / p;
    // (B, C, H, W) -> (B, C, H/p, p, W/p, p) -> (B, H/p, W/p, C, p, p) -> (B, tokens, C·p·p)
    const Tensor split = ad::reshape(x, Shape{batch, channels, rows, p, cols, p});
    return ad::reshape(ad::transpose(split, {0, 2, 4, 1, 3, 5}), Shape{batch, rows * cols, channels * p * p});
}

// ---- PositionEmbedding ------------------------------------------------------------------------------

std::vector<Variable> PositionEmbedding::variables() const { return table_; }

Shape PositionEmbedding::do_build(const Shape& input_shape, Rng& init_rng) {
    require_tokens(*this, input_shape);
    table_ = {make_variable(random_uniform(input_shape, -0.05f, 0.05f, init_rng), "embeddings")};
    return input_shape;
}

Tensor PositionEmbedding::forward(const Tensor& x, const CallContext&) { return ad::add(x, table_[0].read()); }

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
    require_tokens(*this, input_shape);
    const std::size_t width = input_shape[1];
    if (width % heads() != 0)
        throw ad::shape_error(describe(*this) + ": width " + std::to_string(width) + " of examples " +
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
        throw std::logic_error(describe(*this) + " is called with training = true and dropout " +
                               format_float(dropout_) + " but no CallContext::dropout_rng");
    return ad::dropout(x, dropout_, *context.dropout_rng, true);
}

Tensor TransformerBlock::forward(const Tensor& x, const CallContext& context) {
    Tensor h = ad::layer_norm(x, norm1_[0].read(), norm1_[1].read(), epsilon_);
    const Tensor y = ad::add(x, drop(attention_(h, context), context));
    h = ad::layer_norm(y, rest_[0].read(), rest_[1].read(), epsilon_);
    h = ad::gelu(ad::dense(h, rest_[2].read(), rest_[3].read()));
    h = ad::dense(h, rest_[4].read(), rest_[5].read());
    return ad::add(y, drop(h, context));
}

// ---- GlobalAveragePooling1D -------------------------------------------------------------------------

Shape GlobalAveragePooling1D::do_build(const Shape& input_shape, Rng&) {
    if (input_shape.rank() != 2 || input_shape[0] == 0)
        throw ad::shape_error(describe(*this) + " expects examples of shape (tokens, width) with tokens ≥ 1, got " +
                              input_shape.to_string());
    return Shape{input_shape[1]};
}

Tensor GlobalAveragePooling1D::forward(const Tensor& x, const CallContext&) { return ad::mean(x, {1}); }

} // namespace mixprec::models
