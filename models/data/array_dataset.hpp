#pragma once
/// ArrayDataset: a dataset made of two arrays, examples in one and their class labels in the other, as
/// NumPy holds them:
///
///   np.save("x.npy", images)   # (n, ...) float32, or uint8 pixels
///   np.save("y.npy", labels)   # (n,) uint8, int32 or int64 class indices
///
/// Examples run along axis 0 of x; example_shape() is the rest of its shape (the caller compares it with
/// the model's input shape). float32 examples are kept as they are; uint8 examples stay uint8 in memory
/// and batch() turns each value v into v / 255 in float32 (exactly 0 and 1 at the ends), as FashionMnist
/// does.
///
/// The arrays come in as ArrayDataset::Array, which says everything in the terms of this folder (NumPy's
/// name of the element type, the shape, the bytes, and where the array came from), because models/data/
/// does not include models/io/ (the floor plan). From .npy files (models/io/npy.hpp), at a level that
/// sees both, such as the trainer:
///
///   ArrayDataset::Array array_of(const std::filesystem::path& path) {
///       models::NpyArray a = models::read_npy(path);           // npy_error naming the file
///       return {std::string(to_string(a.type)), a.shape, std::move(a.bytes), path.string()};
///   }
///   models::ArrayDataset data(array_of("x.npy"), array_of("y.npy"), 10);
///
/// Errors: dataset_error (models/data/fashion_mnist.hpp) for everything about the arrays, naming the
/// array by its `source` and saying what is wrong; std::invalid_argument for a number of classes outside
/// 1 … 2^31 - 1.

#include <mixprec/models/data/dataset.hpp>
#include <mixprec/models/data/fashion_mnist.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mixprec::models {

class ArrayDataset final : public Dataset {
  public:
    /// An array: its elements' bytes, little-endian, in C order (row-major).
    struct Array {
        std::string dtype;               ///< NumPy's name of the element type: "float32", "uint8", "int64", ...
        autodiff::Shape shape;           ///< (n, ...) for examples, (n,) for labels
        std::vector<std::uint8_t> bytes; ///< shape.elements() × the type's size
        std::string source;              ///< where it came from, for messages: a file name, or "x"
    };

    /// x: "float32" or "uint8", rank ≥ 2 (examples along axis 0); labels: "uint8", "int32" or "int64", rank
    /// 1, as many as x has examples, each in [0, num_classes). dataset_error naming the array (its source)
    /// and what is wrong: an element type it does not take, a rank (with the shape), bytes that do not
    /// match the shape, both counts when they differ, the first label out of range and its index.
    ArrayDataset(Array x, const Array& labels, std::size_t num_classes);

    std::size_t size() const override { return labels_.size(); }
    /// x's shape without axis 0.
    autodiff::Shape example_shape() const override;
    using Dataset::batch; // and the targets as a float32 tensor
    /// x becomes a new float32 tensor of shape (indices.size(), example_shape()...) holding the examples
    /// (uint8 values divided by 255), and labels their labels. std::out_of_range naming the index and
    /// size() when an index is ≥ size(); x and labels are then left unchanged.
    void batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
               std::vector<std::int32_t>& labels) const override;

    /// "float32" or "uint8": the examples as stored.
    const std::string& example_dtype() const { return x_.dtype; }
    std::size_t num_classes() const { return num_classes_; }
    /// All labels, each in [0, num_classes()).
    std::span<const std::int32_t> labels() const { return labels_; }

  private:
    Array x_; // (n, ...) float32 or uint8
    std::vector<std::int32_t> labels_;
    std::size_t num_classes_;
};

} // namespace mixprec::models
