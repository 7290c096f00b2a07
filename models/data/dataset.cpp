// TensorDataset: examples held in one float32 tensor, batches gathered row by row (see dataset.hpp).

#include <mixprec/models/data/dataset.hpp>

#include <mixprec/models/data/detail/batch.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

namespace mixprec::models {

/// x is converted to float32 once (shared, not copied, when it already is float32).
TensorDataset::TensorDataset(autodiff::Tensor x, std::vector<std::int32_t> labels)
    : x_(x.to(autodiff::Dtype::float32)), labels_(std::move(labels)) {
    if (x_.rank() == 0) throw std::invalid_argument("TensorDataset: x must have an example axis, got shape ()");
    if (x_.shape()[0] != labels_.size()) {
        std::string message = "TensorDataset: x ";
        message += x_.shape().to_string();
        message += " holds ";
        message += std::to_string(x_.shape()[0]);
        message += " examples but there are ";
        message += std::to_string(labels_.size());
        message += " labels";
        throw std::invalid_argument(message);
    }
}

autodiff::Shape TensorDataset::example_shape() const {
    return autodiff::Shape(std::span<const std::size_t>(x_.shape().begin() + 1, x_.shape().end()));
}

/// Every index is checked before anything is written: std::out_of_range "index 12 (position 3 of the
/// batch) is out of range for a dataset of 10 examples" leaves x and labels untouched.
void TensorDataset::batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
                          std::vector<std::int32_t>& labels) const {
    detail::check_indices(indices, size(), "TensorDataset::batch");
    const autodiff::Shape example = example_shape();
    autodiff::Tensor out = detail::batch_tensor(indices.size(), example);
    std::vector<std::int32_t> out_labels(indices.size());
    const std::size_t row = example.elements();
    const std::span<const float> src = x_.data<float>();
    const std::span<float> dst = out.data<float>();
    for (std::size_t i = 0; i < indices.size(); ++i) {
        if (row > 0) std::memcpy(dst.data() + i * row, src.data() + indices[i] * row, row * sizeof(float));
        out_labels[i] = labels_[indices[i]];
    }
    x = std::move(out);
    labels = std::move(out_labels);
}

} // namespace mixprec::models
