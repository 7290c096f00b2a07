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
///   auto opt = std::make_shared<amp::LossScaleOptimizer>(std::make_unique<optim::Adam>(optim::Adam::Options{}));
///   model.compile(opt, "sparse_categorical_crossentropy", {"accuracy"});
///   model.fit(train, {.epochs = 5, .batch_size = 128});

#include <mixprec/models/io/training_state.hpp>
#include <mixprec/models/layers/layer.hpp>
#include <mixprec/models/training/losses.hpp>
#include <mixprec/models/training/metrics.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
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
    /// generator seeded with `seed`, so the same seed gives the same weights. std::logic_error for a
    /// model without layers.
    void build(const Shape& input_shape, std::uint64_t seed = 0);
    bool built() const { return built_; }
    const Shape& input_shape() const { return input_shape_; }
    /// Shape of one output example (after build).
    Shape output_shape() const;

    /// The forward pass on a batch: float32 outputs under every policy (the last layer's result, widened
    /// exactly, as Keras recommends for mixed precision; its gradient is rounded back once). logic_error
    /// before build.
    Tensor operator()(const Tensor& x, const CallContext& context = {});

    /// Every variable, layer by layer, in a fixed order (checkpoints rely on it).
    std::vector<Variable> variables() const;
    std::vector<Variable> trainable_variables() const;
    std::size_t count_params() const;

    /// A table as Keras prints it: layer (kind), output shape, parameters, dtype policy; then totals.
    std::string summary() const;

    const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

    /// Keeps the optimizer (shared with the caller, who may keep a handle to read its loss scale), the
    /// loss and the metrics (losses.hpp, metrics.hpp) for fit and evaluate. std::invalid_argument for a
    /// null optimizer, an unknown name, "accuracy" under a loss that compares values, or a cross-entropy
    /// on logits (a loss by name) for a model whose last layer ends in softmax or sigmoid.
    void compile(std::shared_ptr<optim::Optimizer> optimizer, Loss loss = "sparse_categorical_crossentropy",
                 std::vector<Metric> metrics = {"accuracy"});
    /// An optimizer by reference would dangle once it goes out of scope (and fit would crash): refused
    /// when the program compiles. Pass a std::shared_ptr (std::make_shared<optim::Adam>(...)).
    template <class O, class... Rest>
    requires std::derived_from<std::remove_cvref_t<O>, optim::Optimizer>
    void compile(O&&, Rest&&...) = delete;
    bool compiled() const { return optimizer_ != nullptr; }
    /// The compiled optimizer; logic_error if not compiled.
    optim::Optimizer& optimizer() const;
    /// The compiled loss and metrics (resolved for the loss); logic_error if not compiled.
    const Loss& loss() const;
    const std::vector<Metric>& metrics() const;
    /// models::fit with the compiled optimizer, loss and metrics (unless the options name others) and this
    /// model's training state; logic_error if not compiled.
    std::vector<EpochLogs> fit(const Dataset& data, const FitOptions& options);
    /// The compiled loss and metrics when compiled; otherwise evaluate's defaults.
    Evaluation evaluate(const Dataset& data, std::size_t batch_size = 256);
    Tensor predict(const Dataset& data, std::size_t batch_size = 256);
    /// Where training is (fit advances it; checkpoints save and restore it).
    TrainingState& training_state() { return state_; }
    const TrainingState& training_state() const { return state_; }

  private:
    std::vector<std::unique_ptr<Layer>> layers_;
    Shape input_shape_;
    bool built_ = false;
    std::shared_ptr<optim::Optimizer> optimizer_;
    std::optional<Loss> loss_;
    std::vector<Metric> metrics_;
    TrainingState state_;
};

} // namespace mixprec::models
