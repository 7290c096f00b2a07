#pragma once
/// Seeded weight initializers, as Keras's: each draws from the generator it is given, so a model built
/// twice from the same seed has the same weights, bit for bit. All return float32 tensors.

#include <mixprec/autodiff/tensor/rng.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstddef>

namespace mixprec::models {

/// Uniform in [-l, l] with l = √(6 / (fan_in + fan_out)) (Glorot and Bengio, 2010).
autodiff::Tensor glorot_uniform(const autodiff::Shape& shape, std::size_t fan_in, std::size_t fan_out,
                                autodiff::Rng& rng);
/// Normal with mean 0 and standard deviation √(2 / fan_in), truncated at two standard deviations
/// (redrawn beyond), as Keras's he_normal (He et al., 2015).
autodiff::Tensor he_normal(const autodiff::Shape& shape, std::size_t fan_in, autodiff::Rng& rng);
/// Uniform in [low, high).
autodiff::Tensor random_uniform(const autodiff::Shape& shape, float low, float high, autodiff::Rng& rng);
autodiff::Tensor zeros(const autodiff::Shape& shape);
autodiff::Tensor ones(const autodiff::Shape& shape);

} // namespace mixprec::models
