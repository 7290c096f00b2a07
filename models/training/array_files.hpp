#pragma once
/// Datasets from NumPy files: where models/data/ (ArrayDataset) meets models/io/ (the .npy reader).
///
///   models::ArrayDataset train = models::load_array_dataset("train_x.npy", "train_y.npy", 10);

#include <mixprec/models/data/array_dataset.hpp>

#include <cstddef>
#include <filesystem>
#include <optional>

namespace mixprec::models {

/// The dataset of the examples in the .npy file `x` (float32 or uint8, examples along axis 0) and the
/// class labels in the .npy file `labels` (uint8, int32 or int64, one per example, each < num_classes).
/// With `example_shape`, each example is viewed in that shape (row-major, as a reshape): (n, 28, 28) or
/// (n, 784) images as (1, 28, 28) ones; the element counts must agree.
/// npy_error naming the file that cannot be read or is malformed; dataset_error naming the file whose
/// contents do not make a dataset (see ArrayDataset), or whose examples have another element count than
/// `example_shape` (both shapes named).
ArrayDataset load_array_dataset(const std::filesystem::path& x, const std::filesystem::path& labels,
                                std::size_t num_classes, std::optional<autodiff::Shape> example_shape = std::nullopt);

} // namespace mixprec::models
