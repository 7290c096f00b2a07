#pragma once
// Internal to models/data/ (never installed): what every Dataset::batch does before it copies examples.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::models::detail {

/// Throws std::out_of_range "<who>: index 12 (position 3 of the batch) is out of range for a dataset of 10
/// examples" for the first index ≥ size, before the caller writes anything.
inline void check_indices(std::span<const std::size_t> indices, std::size_t size, std::string_view who) {
    for (std::size_t i = 0; i < indices.size(); ++i)
        if (indices[i] >= size) {
            std::string message(who);
            message += ": index ";
            message += std::to_string(indices[i]);
            message += " (position ";
            message += std::to_string(i);
            message += " of the batch) is out of range for a dataset of ";
            message += std::to_string(size);
            message += " examples";
            throw std::out_of_range(message);
        }
}

/// An uninitialized float32 tensor of shape (count, example...), for a batch of `count` examples.
inline autodiff::Tensor batch_tensor(std::size_t count, const autodiff::Shape& example) {
    std::vector<std::size_t> dims{count};
    dims.insert(dims.end(), example.begin(), example.end());
    return autodiff::Tensor::uninitialized(autodiff::Shape(std::span<const std::size_t>(dims)));
}

} // namespace mixprec::models::detail
