#pragma once
// A small classification problem for the tests of fit and of models.

#include <mixprec/autodiff/tensor/rng.hpp>
#include <mixprec/models/data/dataset.hpp>

#include <cstdint>
#include <vector>

namespace test_data {

/// Three Gaussian blobs in 8 dimensions, one per class: easy to separate, so a small model must learn them.
inline mixprec::models::TensorDataset blobs(std::size_t n, std::uint64_t seed) {
    using mixprec::autodiff::Shape;
    mixprec::autodiff::Rng rng(seed);
    std::vector<float> x(n * 8);
    std::vector<std::int32_t> y(n);
    for (std::size_t i = 0; i < n; ++i) {
        y[i] = static_cast<std::int32_t>(rng() % 3);
        for (std::size_t j = 0; j < 8; ++j) {
            const float centre = (j % 3 == std::size_t(y[i])) ? 2.0f : 0.0f;
            x[i * 8 + j] = centre + (rng.uniform() - 0.5f);
        }
    }
    return mixprec::models::TensorDataset(mixprec::autodiff::Tensor::from_floats(Shape{n, 8}, x), std::move(y));
}

} // namespace test_data
