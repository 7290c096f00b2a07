// Conv2D over channels-first images (see layers_conv.hpp).

#include <mixprec/models/layers/layers_conv.hpp>

#include <mixprec/models/layers/detail/checks.hpp>
#include <mixprec/models/layers/initializers.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/layers/pooling.hpp>

#include <mixprec/autodiff/ops_conv.hpp>
#include <mixprec/autodiff/ops_shape.hpp>

#include <stdexcept>
#include <vector>

namespace mixprec::models {
namespace {

using detail::check_positive;
using detail::pair_string;

/// x with `count` rows (axis 2) or columns (axis 3) of zeros appended, through concat so that gradients
/// flow back to x.
Tensor pad_end(const Tensor& x, int axis, std::size_t count) {
    if (count == 0) return x;
    std::vector<std::size_t> dims(x.shape().begin(), x.shape().end());
    dims[static_cast<std::size_t>(axis)] = count;
    return autodiff::concat({x, Tensor(Shape(std::span<const std::size_t>(dims)), x.dtype())}, axis);
}

} // namespace

// ---- Conv2D ----

Conv2D::Conv2D(std::size_t filters, Size2 kernel, std::string activation, Size2 stride, std::string padding,
               bool use_bias)
    : filters_(filters),
      kernel_(kernel),
      activation_(std::move(activation)),
      stride_(stride),
      padding_(std::move(padding)),
      use_bias_(use_bias) {
    if (filters_ == 0) throw std::invalid_argument("Conv2D: filters must be > 0, got 0");
    check_positive("Conv2D", "kernel size", kernel_);
    check_positive("Conv2D", "stride", stride_);
    if (padding_ != "valid" && padding_ != "same") {
        std::string message = "Conv2D: padding must be \"valid\" or \"same\", got \"";
        message += padding_;
        message += "\"";
        throw std::invalid_argument(message);
    }
    check_activation(activation_);
}

/// Options left at their defaults (strides (1, 1), "valid", no activation, a bias) are not listed.
std::string Conv2D::config() const {
    std::string c = "filters=";
    c += std::to_string(filters_);
    c += ", kernel_size=";
    c += pair_string(kernel_);
    if (stride_ != Size2{1, 1}) {
        c += ", strides=";
        c += pair_string(stride_);
    }
    if (padding_ != "valid") {
        c += ", padding=";
        c += padding_;
    }
    if (!activation_.empty()) {
        c += ", activation=";
        c += activation_;
    }
    if (!use_bias_) c += ", use_bias=false";
    return c;
}

std::vector<Variable> Conv2D::variables() const {
    std::vector<Variable> v;
    if (kernel_var_) v.push_back(*kernel_var_);
    if (bias_) v.push_back(*bias_);
    return v;
}

Shape Conv2D::do_build(const Shape& input_shape, Rng& init_rng) {
    const bool valid = padding_ == "valid";
    std::string expected = "(C, H, W)";
    if (valid) {
        expected += " with H >= ";
        expected += std::to_string(kernel_[0]);
        expected += " and W >= ";
        expected += std::to_string(kernel_[1]);
        expected += " (kernel ";
        expected += pair_string(kernel_);
        expected += ", padding \"valid\")";
    }
    const Shape& in = input_shape;
    if (in.rank() != 3 || (valid && (in[1] < kernel_[0] || in[2] < kernel_[1])))
        throw_input_shape_error(*this, in, expected);

    Size2 out{};
    for (std::size_t a = 0; a < 2; ++a) {
        const std::size_t size = in[a + 1], k = kernel_[a], s = stride_[a];
        if (valid) {
            out[a] = (size - k) / s + 1;
        } else { // TensorFlow's "SAME": ⌈size/s⌉ outputs, the total padding split with the extra one after
            out[a] = (size + s - 1) / s;
            const std::size_t needed = (out[a] - 1) * s + k;
            const std::size_t total = needed > size ? needed - size : 0;
            pad_before_[a] = total / 2;
            pad_after_[a] = total - total / 2;
        }
    }
    const std::size_t channels = in[0], taps = kernel_[0] * kernel_[1];
    kernel_var_ = make_variable(
        glorot_uniform(Shape{filters_, channels, kernel_[0], kernel_[1]}, channels * taps, filters_ * taps, init_rng),
        "kernel");
    if (use_bias_) bias_ = make_variable(zeros(Shape{filters_}), "bias");
    return Shape{filters_, out[0], out[1]};
}

autodiff::Conv2dOptions Conv2D::conv_options() const {
    autodiff::Conv2dOptions options;
    options.stride = stride_;
    options.padding = pad_before_;
    options.relu = activation_ == "relu"; // fused: the same bits, a pass fewer each way
    return options;
}

Tensor Conv2D::padded(const Tensor& x) const {
    // conv2d pads both sides equally: the odd zero row/column of "same" is appended here first.
    return pad_end(pad_end(x, 2, pad_after_[0] - pad_before_[0]), 3, pad_after_[1] - pad_before_[1]);
}

bool Conv2D::in_fp8(const CallContext& context) { return context.fp8 != nullptr && policy().fp8_products() && fp8(); }

std::optional<Tensor> Conv2D::bias() const { return bias_ ? std::optional<Tensor>(bias_->read()) : std::nullopt; }

Tensor Conv2D::forward(const Tensor& x, const CallContext& context) {
    const autodiff::Conv2dOptions options = conv_options();
    const Tensor y = in_fp8(context) ? autodiff::conv2d_fp8(padded(x), kernel_var_->read(), bias(),
                                                            context.fp8->dense_casts(name()), options)
                                     : autodiff::conv2d(padded(x), kernel_var_->read(), bias(), options);
    return options.relu ? y : apply_activation(y, activation_);
}

bool Conv2D::fuses_with(const Layer& next, const CallContext& context) {
    const auto* pool = dynamic_cast<const MaxPool2D*>(&next);
    constexpr Size2 two{2, 2};
    return pool && pool->pool_size() == two && pool->stride() == two && !in_fp8(context) &&
           (activation_.empty() || activation_ == "relu");
}

Tensor Conv2D::forward_fused(const Layer&, const Tensor& x, const CallContext&) {
    return autodiff::conv2d_max_pool(padded(x), kernel_var_->read(), bias(), conv_options());
}

} // namespace mixprec::models
