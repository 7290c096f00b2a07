#pragma once
/// Dataset: examples with integer class labels, read a batch at a time. fit, evaluate and predict take
/// one; a dataset keeps its examples in whatever form is cheapest (Fashion-MNIST keeps uint8 pixels) and
/// produces float32 batches on demand.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace mixprec::models {

class Dataset {
  public:
    virtual ~Dataset() = default;
    /// Number of examples.
    virtual std::size_t size() const = 0;
    /// Shape of one example (without the batch axis).
    virtual autodiff::Shape example_shape() const = 0;
    /// The examples at `indices` (each < size()), in that order: x becomes a float32 tensor of shape
    /// (indices.size(), example_shape()...) and labels their labels.
    virtual void batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
                       std::vector<std::int32_t>& labels) const = 0;
};

/// A dataset held as one float32 tensor (examples along axis 0) and its labels.
class TensorDataset final : public Dataset {
  public:
    /// std::invalid_argument unless x has rank ≥ 1 and as many examples as labels.
    TensorDataset(autodiff::Tensor x, std::vector<std::int32_t> labels);
    std::size_t size() const override { return labels_.size(); }
    autodiff::Shape example_shape() const override;
    void batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
               std::vector<std::int32_t>& labels) const override;

  private:
    autodiff::Tensor x_; // float32
    std::vector<std::int32_t> labels_;
};

} // namespace mixprec::models
