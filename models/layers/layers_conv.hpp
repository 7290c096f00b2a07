#pragma once
/// Convolution and pooling layers over images, as Keras's Conv2D, MaxPooling2D and AveragePooling2D,
/// but channels first: examples have shape (C, H, W) and batches (N, C, H, W), the layout of
/// autodiff::conv2d and the pooling ops.

#include <mixprec/models/layers/layer.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <string>

namespace mixprec::models {

/// A pair of spatial sizes: (rows, columns).
using Size2 = std::array<std::size_t, 2>;

/// 2-D convolution: y = activation(conv2d(x, W) + b), W (filters, C, kh, kw), b (filters).
/// padding "valid": no padding, Ho = (H − kh)/stride + 1 (rounded down).
/// padding "same": Ho = ⌈H / stride⌉, with zeros around the input as TensorFlow places them (the odd one,
/// when the total is odd, at the bottom/right).
/// W starts glorot_uniform with Keras's fans, fan_in = C·kh·kw and fan_out = filters·kh·kw; b at zeros.
/// Variables "<name>/kernel", "<name>/bias".
class Conv2D final : public Layer {
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

  private:
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

/// What MaxPool2D and AvgPool2D share: windows of `pool` moved by `stride` (0 = the pool size, Keras's
/// strides=None), no padding ("valid"): Ho = (H − ph)/stride + 1 (rounded down). No variables.
class Pool2D : public Layer {
  public:
    std::string config() const override;
    Size2 pool_size() const { return pool_; }
    /// The stride in effect (the pool size when 0 was given).
    Size2 stride() const { return stride_; }

  protected:
    /// std::invalid_argument naming `who` when a pool size is 0.
    Pool2D(const char* who, Size2 pool, Size2 stride);
    /// shape_error unless the example has rank 3 (C, H, W) with H ≥ ph and W ≥ pw.
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;

    Size2 pool_;
    Size2 stride_;
};

/// Max pooling: each output is the largest element of its window.
class MaxPool2D final : public Pool2D {
  public:
    explicit MaxPool2D(Size2 pool = {2, 2}, Size2 stride = {0, 0}) : Pool2D("MaxPool2D", pool, stride) {}
    std::string kind() const override { return "MaxPooling2D"; }

  protected:
    Tensor forward(const Tensor& x, const CallContext& context) override;
};

/// Average pooling: each output is the mean of its window.
class AvgPool2D final : public Pool2D {
  public:
    explicit AvgPool2D(Size2 pool = {2, 2}, Size2 stride = {0, 0}) : Pool2D("AvgPool2D", pool, stride) {}
    std::string kind() const override { return "AveragePooling2D"; }

  protected:
    Tensor forward(const Tensor& x, const CallContext& context) override;
};

} // namespace mixprec::models
