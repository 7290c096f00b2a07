// The core layers: Dense, Flatten, Activation, Dropout, and the named activations (see layers_core.hpp).

#include <mixprec/models/layers/layers_core.hpp>

#include <mixprec/models/layers/detail/products.hpp>
#include <mixprec/models/layers/initializers.hpp>

#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_matmul.hpp>
#include <mixprec/autodiff/ops_nn.hpp>
#include <mixprec/autodiff/ops_shape.hpp>
#include <mixprec/autodiff/ops_softmax.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace mixprec::models {
namespace {

using Activate = Tensor (*)(const Tensor&);

Tensor identity(const Tensor& x) { return x; }
Tensor softmax_last(const Tensor& x) { return autodiff::softmax(x, -1); }

struct NamedActivation {
    std::string_view name;
    Activate apply;
};

/// Every activation by name; the message for an unknown name lists them in this order.
constexpr std::array<NamedActivation, 7> activations{{{"", identity},
                                                      {"linear", identity},
                                                      {"relu", autodiff::relu},
                                                      {"gelu", autodiff::gelu},
                                                      {"tanh", autodiff::tanh},
                                                      {"sigmoid", autodiff::sigmoid},
                                                      {"softmax", softmax_last}}};

Activate find_activation(std::string_view name) {
    for (const NamedActivation& a : activations)
        if (a.name == name) return a.apply;
    std::string message = "unknown activation '";
    message += name;
    message += "': valid names are \"\" and \"linear\" (identity)";
    for (std::size_t i = 2; i < activations.size(); ++i) {
        message += ", \"";
        message += activations[i].name;
        message += "\"";
    }
    throw std::invalid_argument(message);
}

} // namespace

void check_activation(std::string_view name) { find_activation(name); }

Tensor apply_activation(const Tensor& x, std::string_view name) { return find_activation(name)(x); }

std::string describe_layer(const Layer& layer) {
    if (layer.name().empty()) return layer.kind() + " layer";
    std::string s = "layer '";
    s += layer.name();
    s += "' (";
    s += layer.kind();
    s += ")";
    return s;
}

void throw_input_shape_error(const Layer& layer, const Shape& got, std::string_view expected) {
    std::string message = describe_layer(layer);
    message += " needs examples of shape ";
    message += expected;
    message += ", got ";
    message += got.to_string();
    throw autodiff::shape_error(message);
}

// ---- Dense ----

Dense::Dense(std::size_t units, std::string activation, bool use_bias)
    : units_(units), activation_(std::move(activation)), use_bias_(use_bias) {
    if (units_ == 0) throw std::invalid_argument("Dense: units must be > 0, got 0");
    check_activation(activation_);
}

std::string Dense::config() const {
    std::string c = "units=";
    c += std::to_string(units_);
    if (!activation_.empty()) {
        c += ", activation=";
        c += activation_;
    }
    if (!use_bias_) c += ", use_bias=false";
    return c;
}

std::vector<Variable> Dense::variables() const {
    std::vector<Variable> v;
    if (kernel_) v.push_back(*kernel_);
    if (bias_) v.push_back(*bias_);
    return v;
}

Shape Dense::do_build(const Shape& input_shape, Rng& init_rng) {
    if (input_shape.rank() == 0) throw_input_shape_error(*this, input_shape, "(..., in) (rank >= 1)");
    const std::size_t in = input_shape[input_shape.rank() - 1];
    kernel_ = make_variable(glorot_uniform(Shape{in, units_}, in, units_, init_rng), "kernel");
    if (use_bias_) bias_ = make_variable(zeros(Shape{units_}), "bias");
    std::vector<std::size_t> out(input_shape.begin(), input_shape.end());
    out.back() = units_;
    return Shape(std::span<const std::size_t>(out));
}

Tensor Dense::forward(const Tensor& x, const CallContext& context) {
    const std::optional<Tensor> bias = bias_ ? std::optional<Tensor>(bias_->read()) : std::nullopt;
    return apply_activation(detail::product(x, kernel_->read(), bias, policy(), fp8(), context, name()), activation_);
}

// ---- Flatten ----

Shape Flatten::do_build(const Shape& input_shape, Rng&) { return Shape{input_shape.elements()}; }

Tensor Flatten::forward(const Tensor& x, const CallContext&) {
    return autodiff::reshape(x, Shape{x.shape()[0], output_shape()[0]});
}

// ---- Activation ----

Activation::Activation(std::string activation) : activation_(std::move(activation)) { check_activation(activation_); }

std::string Activation::config() const {
    std::string c = "activation=";
    c += activation_.empty() ? std::string("linear") : activation_;
    return c;
}

Shape Activation::do_build(const Shape& input_shape, Rng&) { return input_shape; }

Tensor Activation::forward(const Tensor& x, const CallContext&) { return apply_activation(x, activation_); }

// ---- Rescaling ----

Rescaling::Rescaling(float scale, float offset) : scale_(scale), offset_(offset) {
    if (!std::isfinite(scale) || !std::isfinite(offset)) {
        char message[96];
        std::snprintf(message, sizeof message, "Rescaling: scale and offset must be finite, got scale=%g offset=%g",
                      double(scale), double(offset));
        throw std::invalid_argument(message);
    }
}

std::string Rescaling::config() const {
    char text[64];
    std::snprintf(text, sizeof text, "scale=%.9g, offset=%.9g", double(scale_), double(offset_));
    return text;
}

Shape Rescaling::do_build(const Shape& input_shape, Rng&) { return input_shape; }

Tensor Rescaling::forward(const Tensor& x, const CallContext&) {
    const Tensor y = autodiff::scale(x, scale_);
    if (offset_ == 0.0f) return y;
    return autodiff::add(y, Tensor::full(Shape{1}, offset_, y.dtype()));
}

// ---- Dropout ----

Dropout::Dropout(float rate) : rate_(rate) {
    if (!(rate >= 0.0f && rate < 1.0f)) {
        std::string message = "Dropout: rate must be in [0, 1), got ";
        message += std::to_string(rate);
        throw std::invalid_argument(message);
    }
}

std::string Dropout::config() const {
    std::ostringstream c;
    c << "rate=" << rate_;
    return c.str();
}

Shape Dropout::do_build(const Shape& input_shape, Rng&) { return input_shape; }

Tensor Dropout::forward(const Tensor& x, const CallContext& context) {
    if (!context.training || rate_ == 0.0f) return x;
    if (context.dropout_rng == nullptr) {
        std::string message = describe_layer(*this);
        message += ": a training call needs CallContext::dropout_rng to draw its mask";
        throw std::logic_error(message);
    }
    return autodiff::dropout(x, rate_, *context.dropout_rng, true);
}

} // namespace mixprec::models
