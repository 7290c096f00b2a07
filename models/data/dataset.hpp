#pragma once
/// Dataset: examples and their targets, read a batch at a time. fit, evaluate and predict take one; a
/// dataset keeps its examples in whatever form is cheapest (Fashion-MNIST keeps uint8 pixels) and
/// produces float32 batches on demand.
///
/// Targets are what the loss compares the model's outputs with: class labels (the default: one integer
/// per example, target_shape() = ()) or any float32 values of target_shape() per example (regression,
/// one-hot or multi-label classification). fit hands both to the loss as a float32 tensor y of shape
/// (batch, target_shape()...); class labels become their indices, exact in float32 up to 2^24.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
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
    /// Shape of one example's target (without the batch axis): () for a class label.
    virtual autodiff::Shape target_shape() const { return autodiff::Shape{}; }
    /// The examples at `indices` (each < size()), in that order: x becomes a float32 tensor of shape
    /// (indices.size(), example_shape()...) and labels their class labels. A dataset of other targets
    /// throws std::logic_error (it holds no class labels).
    virtual void batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
                       std::vector<std::int32_t>& labels) const = 0;
    /// The same with the targets as a float32 tensor y of shape (indices.size(), target_shape()...). By
    /// default, the class labels of the overload above as float32 (exact up to 2^24).
    virtual void batch(std::span<const std::size_t> indices, autodiff::Tensor& x, autodiff::Tensor& y) const;
};

/// A dataset held as one float32 tensor (examples along axis 0) and its class labels or targets:
///
///   models::TensorDataset classes(x, labels);   // labels: std::vector<std::int32_t>, one per example
///   models::TensorDataset values(x, y);         // y: a tensor (examples, ...), e.g. (n, 1) for regression
class TensorDataset final : public Dataset {
  public:
    /// std::invalid_argument unless x has rank ≥ 1 and as many examples as labels, each in [0, 2^24].
    TensorDataset(autodiff::Tensor x, std::vector<std::int32_t> labels);
    /// Labels written out: TensorDataset(x, {0, 2, 1}).
    TensorDataset(autodiff::Tensor x, std::initializer_list<std::int32_t> labels)
        : TensorDataset(std::move(x), std::vector<std::int32_t>(labels)) {}
    /// Targets y (any dtype, kept as float32). std::invalid_argument unless x and y have rank ≥ 1 and
    /// the same number of examples (axis 0).
    TensorDataset(autodiff::Tensor x, autodiff::Tensor y);
    std::size_t size() const override { return x_.shape()[0]; }
    autodiff::Shape example_shape() const override;
    autodiff::Shape target_shape() const override;
    /// Class labels; std::logic_error for a dataset made with targets y.
    void batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
               std::vector<std::int32_t>& labels) const override;
    void batch(std::span<const std::size_t> indices, autodiff::Tensor& x, autodiff::Tensor& y) const override;

  private:
    autodiff::Tensor x_;                // (n, example...) float32
    std::vector<std::int32_t> labels_;  // (n), or empty with y_
    std::optional<autodiff::Tensor> y_; // (n, target...) float32
};

/// Consecutive examples of another dataset, [begin, begin + count), without copying them: what
/// FitOptions::validation_split holds out. `data` must outlive the slice. std::invalid_argument when the
/// range does not lie inside `data`.
class DatasetSlice final : public Dataset {
  public:
    DatasetSlice(const Dataset& data, std::size_t begin, std::size_t count);
    std::size_t size() const override { return count_; }
    autodiff::Shape example_shape() const override { return data_->example_shape(); }
    autodiff::Shape target_shape() const override { return data_->target_shape(); }
    void batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
               std::vector<std::int32_t>& labels) const override;
    void batch(std::span<const std::size_t> indices, autodiff::Tensor& x, autodiff::Tensor& y) const override;

  private:
    /// `indices` shifted into data_'s numbering (each checked against size()).
    std::vector<std::size_t> shifted(std::span<const std::size_t> indices) const;

    const Dataset* data_;
    std::size_t begin_, count_;
};

} // namespace mixprec::models
