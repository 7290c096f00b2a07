#pragma once
/// Sequential: a stack of layers, each feeding the next, as Keras's.
///
///   models::Sequential model{models::Dense(512, "relu"), models::Dense(10)};
///   model.build(Shape{784}, /*seed=*/1);
///   std::cout << model.summary();
///   Tensor logits = model(x);                      // inference; model(x, {.training = true, ...}) to train
///
/// The Keras loop, the short way (fit.hpp has the details and the free functions behind it):
///
///   model.compile(opt, "sparse_categorical_crossentropy", {"accuracy"});
///   model.fit(train, {.epochs = 5, .batch_size = 128});

#include <mixprec/models/io/training_state.hpp>
#include <mixprec/models/layers/layer.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mixprec::optim {
class Optimizer;
}

namespace mixprec::models {

class Dataset;
struct EpochLogs;
struct Evaluation;
struct FitOptions;

class Sequential {
  public:
    Sequential() = default;
    template <std::derived_from<Layer>... L>
    explicit Sequential(L... layers) {
        (add(std::move(layers)), ...);
    }
    Sequential(Sequential&&) noexcept = default;
    Sequential& operator=(Sequential&&) noexcept = default;

    /// Appends a layer (before build); an unnamed layer gets its kind's snake_case name, numbered
    /// ("dense", "dense_1", ...); a name already taken is an std::invalid_argument.
    Sequential& add(std::unique_ptr<Layer> layer);
    template <std::derived_from<Layer> L>
    Sequential& add(L layer) {
        return add(std::unique_ptr<Layer>(std::make_unique<L>(std::move(layer))));
    }

    /// Builds every layer for examples of `input_shape` (no batch axis); initial values come from a
    /// generator seeded with `seed`, so the same seed gives the same weights.
    void build(const Shape& input_shape, std::uint64_t seed = 0);
    bool built() const { return built_; }
    const Shape& input_shape() const { return input_shape_; }
    /// Shape of one output example (after build).
    Shape output_shape() const;

    /// The forward pass on a batch. logic_error before build.
    Tensor operator()(const Tensor& x, const CallContext& context = {});

    /// Every variable, layer by layer, in a fixed order (checkpoints rely on it).
    std::vector<Variable> variables() const;
    std::vector<Variable> trainable_variables() const;
    std::size_t count_params() const;

    /// A table as Keras prints it: layer (kind), output shape, parameters, dtype policy; then totals.
    std::string summary() const;

    const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

    /// Remembers the optimizer (not owned: it must outlive training) for fit. The loss is
    /// "sparse_categorical_crossentropy" (on logits) and the metrics a subset of {"accuracy"}; other
    /// names are an std::invalid_argument listing the supported ones.
    void compile(optim::Optimizer& optimizer, std::string_view loss = "sparse_categorical_crossentropy",
                 std::vector<std::string> metrics = {"accuracy"});
    bool compiled() const { return optimizer_ != nullptr; }
    /// models::fit with the compiled optimizer and this model's training state; logic_error if not compiled.
    std::vector<EpochLogs> fit(const Dataset& data, const FitOptions& options);
    Evaluation evaluate(const Dataset& data, std::size_t batch_size = 256);
    Tensor predict(const Dataset& data, std::size_t batch_size = 256);
    /// Where training is (fit advances it; checkpoints save and restore it).
    TrainingState& training_state() { return state_; }
    const TrainingState& training_state() const { return state_; }

  private:
    std::vector<std::unique_ptr<Layer>> layers_;
    Shape input_shape_;
    bool built_ = false;
    optim::Optimizer* optimizer_ = nullptr;
    TrainingState state_;
};

} // namespace mixprec::models
