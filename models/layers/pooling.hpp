#pragma once
/// Pooling layers: MaxPool2D and AvgPool2D over channels-first images (C, H, W), as Keras's MaxPooling2D
/// and AveragePooling2D, and GlobalAveragePooling1D over the tokens of sequences (T, D).

#include <mixprec/models/layers/layer.hpp>

#include <string>

namespace mixprec::models {

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

/// The mean over the tokens, as Keras's GlobalAveragePooling1D: (T, D) -> (D), y[b, :] = Σ_t x[b, t, :] / T,
/// summed in float64 and rounded once. No variables.
class GlobalAveragePooling1D final : public Layer {
  public:
    GlobalAveragePooling1D() = default;

    std::string kind() const override { return "GlobalAveragePooling1D"; }

  protected:
    /// shape_error naming the layer and the shape unless the example has shape (T, D) with T ≥ 1.
    Shape do_build(const Shape& input_shape, Rng& init_rng) override;
    Tensor forward(const Tensor& x, const CallContext& context) override;
};

} // namespace mixprec::models
