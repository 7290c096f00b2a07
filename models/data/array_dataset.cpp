// ArrayDataset: the checks of the two arrays, the labels widened to int32 once, and batches gathered row
// by row (uint8 → float32 / 255).

#include <mixprec/models/data/array_dataset.hpp>

#include <mixprec/models/data/detail/batch.hpp>

#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace mixprec::models {

namespace {

template <class... Parts>
std::string cat(const Parts&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    return os.str();
}

std::string in_quotes(const std::string& s) { return cat('\'', s, '\''); }

/// Bytes per element of the types ArrayDataset takes; 0 for any other.
std::size_t itemsize_of(const std::string& dtype) {
    if (dtype == "uint8") return 1;
    if (dtype == "float32" || dtype == "int32") return 4;
    if (dtype == "int64") return 8;
    return 0;
}

void check_bytes(const ArrayDataset::Array& a) {
    const std::uint64_t need = std::uint64_t{a.shape.elements()} * itemsize_of(a.dtype);
    if (a.bytes.size() != need)
        throw dataset_error(cat(in_quotes(a.source), ": ", a.dtype, ' ', a.shape.to_string(), " needs ", need,
                                " bytes, the array holds ", a.bytes.size()));
}

template <class T>
T element(const ArrayDataset::Array& a, std::size_t i) {
    T v;
    std::memcpy(&v, a.bytes.data() + i * sizeof(T), sizeof(T));
    return v;
}

} // namespace

ArrayDataset::ArrayDataset(Array x, const Array& labels, std::size_t num_classes)
    : x_(std::move(x)), num_classes_(num_classes) {
    if (num_classes == 0 || num_classes > std::size_t{std::numeric_limits<std::int32_t>::max()})
        throw std::invalid_argument(cat("ArrayDataset: num_classes must be in 1 … 2^31 - 1, got ", num_classes));
    if (x_.dtype != "float32" && x_.dtype != "uint8")
        throw dataset_error(cat(in_quotes(x_.source), " holds ", x_.dtype,
                                " examples; ArrayDataset takes float32 or uint8 (convert with a.astype('float32'))"));
    if (x_.shape.rank() < 2)
        throw dataset_error(cat(in_quotes(x_.source), " has shape ", x_.shape.to_string(),
                                "; examples need rank ≥ 2: (examples, features...)"));
    check_bytes(x_);
    if (labels.dtype != "uint8" && labels.dtype != "int32" && labels.dtype != "int64")
        throw dataset_error(
            cat(in_quotes(labels.source), " holds ", labels.dtype, " labels; labels must be uint8, int32 or int64"));
    if (labels.shape.rank() != 1)
        throw dataset_error(cat(in_quotes(labels.source), " has shape ", labels.shape.to_string(),
                                "; labels need rank 1: (examples,)"));
    check_bytes(labels);
    const std::size_t n = labels.shape[0];
    if (x_.shape[0] != n)
        throw dataset_error(cat(in_quotes(x_.source), " holds ", x_.shape[0], " examples (shape ", x_.shape.to_string(),
                                ") but ", in_quotes(labels.source), " holds ", n, " labels; the counts must agree"));
    labels_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        std::int64_t label = 0;
        if (labels.dtype == "uint8") label = element<std::uint8_t>(labels, i);
        if (labels.dtype == "int32") label = element<std::int32_t>(labels, i);
        if (labels.dtype == "int64") label = element<std::int64_t>(labels, i);
        if (label < 0 || static_cast<std::uint64_t>(label) >= num_classes)
            throw dataset_error(cat(in_quotes(labels.source), ": label ", label, " at index ", i, " is outside [0, ",
                                    num_classes, ")"));
        labels_[i] = static_cast<std::int32_t>(label);
    }
}

autodiff::Shape ArrayDataset::example_shape() const {
    return autodiff::Shape(std::span<const std::size_t>(x_.shape.begin() + 1, x_.shape.end()));
}

void ArrayDataset::batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
                         std::vector<std::int32_t>& labels) const {
    detail::check_indices(indices, size(), "ArrayDataset::batch");
    const autodiff::Shape example = example_shape();
    autodiff::Tensor out = detail::batch_tensor(indices.size(), example);
    std::vector<std::int32_t> out_labels(indices.size());
    const std::size_t row = example.elements();
    float* dst = out.data<float>().data();
    const bool bytes = x_.dtype == "uint8";
    for (std::size_t b = 0; b < indices.size(); ++b, dst += row) {
        out_labels[b] = labels_[indices[b]];
        if (row == 0) continue;
        if (!bytes) {
            std::memcpy(dst, x_.bytes.data() + indices[b] * row * sizeof(float), row * sizeof(float));
            continue;
        }
        const std::uint8_t* src = x_.bytes.data() + indices[b] * row;
        for (std::size_t k = 0; k < row; ++k) dst[k] = static_cast<float>(src[k]) / 255.0f;
    }
    x = std::move(out);
    labels = std::move(out_labels);
}

} // namespace mixprec::models
