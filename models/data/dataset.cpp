// TensorDataset: examples held in one float32 tensor, batches gathered row by row (see dataset.hpp).

#include <mixprec/models/data/dataset.hpp>

#include <mixprec/models/data/detail/batch.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

namespace mixprec::models {

namespace {

autodiff::Shape without_first_axis(const autodiff::Shape& shape) {
    return autodiff::Shape(std::span<const std::size_t>(shape.begin() + 1, shape.end()));
}

void check_examples(const autodiff::Tensor& x, std::size_t targets, const std::string& what) {
    if (x.rank() == 0) throw std::invalid_argument("TensorDataset: x must have an example axis, got shape ()");
    if (x.shape()[0] != targets) {
        std::string message = "TensorDataset: x ";
        message += x.shape().to_string();
        message += " holds ";
        message += std::to_string(x.shape()[0]);
        message += " examples but there are ";
        message += std::to_string(targets);
        message += what;
        throw std::invalid_argument(message);
    }
}

/// The rows of `source` (float32, rows along axis 0) at `indices` (checked), in that order.
autodiff::Tensor rows(const autodiff::Tensor& source, std::span<const std::size_t> indices) {
    const autodiff::Shape row_shape = without_first_axis(source.shape());
    autodiff::Tensor out = detail::batch_tensor(indices.size(), row_shape);
    const std::size_t row = row_shape.elements();
    const std::span<const float> src = source.data<float>();
    const std::span<float> dst = out.data<float>();
    for (std::size_t i = 0; i < indices.size(); ++i)
        if (row > 0) std::memcpy(dst.data() + i * row, src.data() + indices[i] * row, row * sizeof(float));
    return out;
}

} // namespace

void Dataset::batch(std::span<const std::size_t> indices, autodiff::Tensor& x, autodiff::Tensor& y) const {
    std::vector<std::int32_t> labels;
    batch(indices, x, labels);
    std::vector<float> values(labels.begin(), labels.end());
    y = autodiff::Tensor::from_floats(autodiff::Shape{labels.size()}, values);
}

/// x is converted to float32 once (shared, not copied, when it already is float32).
TensorDataset::TensorDataset(autodiff::Tensor x, std::vector<std::int32_t> labels)
    : x_(x.to(autodiff::Dtype::float32)), labels_(std::move(labels)) {
    check_examples(x_, labels_.size(), " labels");
    for (std::size_t i = 0; i < labels_.size(); ++i)
        if (labels_[i] < 0 || labels_[i] > (1 << 24))
            throw std::invalid_argument("TensorDataset: label " + std::to_string(i) + " is " +
                                        std::to_string(labels_[i]) + "; class labels are in 0 ... 2^24");
}

TensorDataset::TensorDataset(autodiff::Tensor x, autodiff::Tensor y)
    : x_(x.to(autodiff::Dtype::float32)), y_(y.to(autodiff::Dtype::float32)) {
    if (y_->rank() == 0) throw std::invalid_argument("TensorDataset: y must have an example axis, got shape ()");
    check_examples(x_, y_->shape()[0], " targets in y " + y_->shape().to_string());
}

autodiff::Shape TensorDataset::example_shape() const { return without_first_axis(x_.shape()); }

autodiff::Shape TensorDataset::target_shape() const { return y_ ? without_first_axis(y_->shape()) : autodiff::Shape{}; }

void TensorDataset::batch(std::span<const std::size_t> indices, autodiff::Tensor& x, autodiff::Tensor& y) const {
    if (!y_) return Dataset::batch(indices, x, y);
    detail::check_indices(indices, size(), "TensorDataset::batch");
    autodiff::Tensor out_y = rows(*y_, indices);
    x = rows(x_, indices);
    y = std::move(out_y);
}

/// Every index is checked before anything is written: std::out_of_range "index 12 (position 3 of the
/// batch) is out of range for a dataset of 10 examples" leaves x and labels untouched.
void TensorDataset::batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
                          std::vector<std::int32_t>& labels) const {
    if (y_) {
        throw std::logic_error("TensorDataset::batch: this dataset holds targets of shape " +
                               target_shape().to_string() + ", not class labels; read them as a tensor");
    }
    detail::check_indices(indices, size(), "TensorDataset::batch");
    std::vector<std::int32_t> out_labels(indices.size());
    for (std::size_t i = 0; i < indices.size(); ++i) out_labels[i] = labels_[indices[i]];
    x = rows(x_, indices);
    labels = std::move(out_labels);
}

DatasetSlice::DatasetSlice(const Dataset& data, std::size_t begin, std::size_t count)
    : data_(&data), begin_(begin), count_(count) {
    if (begin > data.size() || count > data.size() - begin)
        throw std::invalid_argument("DatasetSlice: examples [" + std::to_string(begin) + ", " + std::to_string(begin) +
                                    " + " + std::to_string(count) + ") of a dataset of " + std::to_string(data.size()) +
                                    " examples");
}

std::vector<std::size_t> DatasetSlice::shifted(std::span<const std::size_t> indices) const {
    detail::check_indices(indices, count_, "DatasetSlice::batch");
    std::vector<std::size_t> out(indices.begin(), indices.end());
    for (std::size_t& i : out) i += begin_;
    return out;
}

void DatasetSlice::batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
                         std::vector<std::int32_t>& labels) const {
    data_->batch(shifted(indices), x, labels);
}

void DatasetSlice::batch(std::span<const std::size_t> indices, autodiff::Tensor& x, autodiff::Tensor& y) const {
    data_->batch(shifted(indices), x, y);
}

} // namespace mixprec::models
