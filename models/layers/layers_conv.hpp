#pragma once
/// The convolution layer over images, as Keras's Conv2D but channels first: examples have shape (C, H, W)
/// and batches (N, C, H, W), the layout of autodiff::conv2d. The pooling layers are in pooling.hpp.

#include <mixprec/autodiff/ops_conv.hpp>
#include <mixprec/models/layers/fp8_choice.hpp>
#include <mixprec/models/layers/layer.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <string>

namespace mixprec::models {

/// 2-D convolution: y = activation(conv2d(x, W) + b), W (filters, C, kh, kw), b (filters).
/// padding "valid": no padding, Ho = (H − kh)/stride + 1 (rounded down).
/// padding "same": Ho = ⌈H / stride⌉, with zeros around the input as TensorFlow places them (the odd one,
/// when the total is odd, at the bottom/right).
/// W starts glorot_uniform with Keras's fans, fan_in = C·kh·kw and fan_out = filters·kh·kw; b at zeros.
/// Variables "<name>/kernel", "<name>/bias".
/// Under mixed_float8, where fp8() (fp8_choice.hpp) and a training step gives it scales, it convolves in
/// FP8 with per-tensor scales (autodiff::conv2d_fp8). Under mixed_mxfp8 it stays in the compute dtype:
/// mixprec has MX blocks for matrix products only (autodiff/ops_mx.hpp), not for convolutions.
class Conv2D final : public Layer, public Fp8Choice {
  public:
    /// std::invalid_argument when filters, a kernel size or a stride is 0, the padding is neither
    /// "valid" nor "same", or the activation is unknown.
    Conv2D(std::size_t filters, Size2 kernel, std::string activation = "", Size2 stride = {1, 1},
           std::string padding = "valid", bool use_bias = true);

    std::string kind() const override { return "Conv2D"; }
    std::string config() const override;
    /// {kernel, bias} (kernel alone without a bias); empty before build.
    std::vector<Variable> variables() const override;

    std::size_t filters() const { return filters_; }
    Size2 kernel_size() const { return kernel_; }
    Size2 stride() const { return stride_; }
    const std::string& padding() const { return padding_; }

  protected:
    /// shape_error unless the example has rank 3 (C, H, W) and, for "valid", H ≥ kh and W ≥ kw.
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    Tensor forward(const Tensor& x, const CallContext& context) override;
    /// With a MaxPool2D of 2×2 windows and stride 2 next, a ReLU or no activation, and not in FP8: both in
    /// one autodiff::conv2d_max_pool (the convolution's output is pooled image by image, never written whole).
    bool fuses_with(const Layer& next, const CallContext& context) override;
    Tensor forward_fused(const Layer& next, const Tensor& x, const CallContext& context) override;

  private:
    /// conv2d's options for this layer, and x padded for them.
    autodiff::Conv2dOptions conv_options() const;
    Tensor padded(const Tensor& x) const;
    std::optional<Tensor> bias() const; ///< the bias variable's value, if the layer has one
    bool in_fp8(const CallContext& context);

    std::size_t filters_;
    Size2 kernel_;
    std::string activation_;
    Size2 stride_;
    std::string padding_;
    bool use_bias_;
    // Zeros added before/after each spatial axis ("same"), fixed at build.
    Size2 pad_before_{0, 0};
    Size2 pad_after_{0, 0};
    std::optional<Variable> kernel_var_;
    std::optional<Variable> bias_;
};

} // namespace mixprec::models
