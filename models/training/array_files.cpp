#include <mixprec/models/training/array_files.hpp>

#include <mixprec/models/io/npy.hpp>

#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::models {
namespace {

ArrayDataset::Array array_of(const std::filesystem::path& path) {
    NpyArray a = read_npy(path);
    return {std::string(to_string(a.type)), a.shape, std::move(a.bytes), path.string()};
}

} // namespace

ArrayDataset load_array_dataset(const std::filesystem::path& x, const std::filesystem::path& labels,
                                std::size_t num_classes, std::optional<autodiff::Shape> example_shape) {
    ArrayDataset::Array examples = array_of(x);
    if (example_shape && examples.shape.rank() >= 1) {
        const std::span<const std::size_t> dims(examples.shape.begin(), examples.shape.end());
        const autodiff::Shape given(dims.subspan(1));
        if (given.elements() != example_shape->elements())
            throw dataset_error("'" + x.string() + "': examples of shape " + given.to_string() + " (" +
                                std::to_string(given.elements()) + " values) cannot be viewed as " +
                                example_shape->to_string() + " (" + std::to_string(example_shape->elements()) +
                                " values)");
        std::vector<std::size_t> view{dims.front()};
        view.insert(view.end(), example_shape->begin(), example_shape->end());
        examples.shape = autodiff::Shape(std::span<const std::size_t>(view));
    }
    return ArrayDataset(std::move(examples), array_of(labels), num_classes);
}

} // namespace mixprec::models
