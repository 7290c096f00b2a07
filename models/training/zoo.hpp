#pragma once
/// The built-in models, for Fashion-MNIST-sized inputs: examples of shape (1, 28, 28), 10 classes,
/// logits out (no softmax: pair them with sparse_categorical_crossentropy(from_logits = true)).
/// Each is returned unbuilt; build it with Shape{1, 28, 28} and a seed.

#include <mixprec/models/training/sequential.hpp>

#include <string_view>
#include <vector>

namespace mixprec::models {

/// Flatten - Dense 512 ReLU - Dense 512 ReLU - Dense 10.
Sequential mlp();
/// Conv 32 3×3 - ReLU - MaxPool 2 - Conv 64 3×3 - ReLU - MaxPool 2 - Flatten - Dense 128 ReLU - Dense 10.
Sequential cnn();
/// A small vision transformer: 7×7 patches (16 tokens) projected to width 64, learned position
/// embeddings, 2 pre-norm blocks of 4-head self-attention and a 128-wide GELU MLP, a final LayerNorm,
/// the mean over tokens, Dense 10.
Sequential vit();

/// "mlp", "cnn" or "vit"; std::invalid_argument listing the names otherwise.
Sequential make_model(std::string_view name);
std::vector<std::string_view> model_names();

} // namespace mixprec::models
