#pragma once
/// Model: what fit, evaluate, predict, checkpoints and summaries work with — Sequential, or a model of
/// your own with any forward pass (residual additions, branches, concatenations), as Keras's Model
/// subclasses. A subclass creates its layers with track() and writes call():
///
///   class ResidualMlp : public models::Model {
///     public:
///       ResidualMlp() : Model("residual_mlp") {}
///
///     private:
///       models::Flatten& flatten_ = track(models::Flatten());
///       models::Dense& inner_ = track(models::Dense(128, "relu"));
///       models::Dense& outer_ = track(models::Dense(128));
///       models::Dense& head_ = track(models::Dense(10));
///
///       Tensor call(const Tensor& x, const models::CallContext& context) override {
///           Tensor h = flatten_(x, context);                    // pass the context on to every layer
///           h = inner_(h, context);
///           h = autodiff::relu(h + outer_(h, context));         // the residual addition
///           return head_(h, context);
///       }
///   };
///
///   ResidualMlp model;
///   model.build(Shape{28, 28}, /*seed=*/1);   // runs call() once on one example: each layer builds itself
///   model.compile(opt, "sparse_categorical_crossentropy", {"accuracy"});
///   model.fit(train, {.epochs = 5, .batch_size = 128});
///
/// Layers build themselves on their first call inside build(), for the examples they are called on, in
/// the order call() reaches them, with initial values drawn from one generator seeded by build's seed, so
/// the same seed gives the same weights. A layer may be called several times (its weights are shared).
/// The model's variables are its layers' in the order they were tracked: the order checkpoints rely on.
/// Under a mixed policy the model returns float32 outputs (its last result widened exactly, as Keras
/// recommends), so losses and metrics see float32.
///
/// A subclass may also override train_step, as in Keras: fit then calls it for every batch (fit.hpp).

#include <mixprec/models/io/training_state.hpp>
#include <mixprec/models/layers/layer.hpp>
#include <mixprec/models/training/losses.hpp>
#include <mixprec/models/training/metrics.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
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
struct TrainStep;
struct TrainStepResult;

class Model {
  public:
    virtual ~Model();
    Model(Model&&) noexcept;
    Model& operator=(Model&&) noexcept;

    /// "sequential", or the name the subclass gave; the title of summary().
    const std::string& name() const { return name_; }

    /// Builds the model for examples of `input_shape` (no batch axis); initial values come from a generator
    /// seeded with `seed`. Sequential builds its layers one after the other; any other model runs call()
    /// once, on a batch of one zero example, and each layer builds itself on its first call. Afterwards
    /// every layer must be built: std::logic_error naming a layer call() never reached, and for a model
    /// without layers. Building twice is a logic_error.
    void build(const Shape& input_shape, std::uint64_t seed = 0);
    bool built() const { return built_; }
    const Shape& input_shape() const { return input_shape_; }
    /// Shape of one output example (after build).
    const Shape& output_shape() const;

    /// The forward pass on a batch: runs call() (each layer checks its input, shape_error naming both
    /// shapes) and returns float32 outputs under every policy (the result widened exactly; its gradient is
    /// rounded back once). logic_error before build.
    Tensor operator()(const Tensor& x, const CallContext& context = {});

    /// Every variable, layer by layer in the order the layers were tracked (checkpoints rely on it).
    std::vector<Variable> variables() const;
    /// The variables training changes: without those of frozen layers (Layer::set_trainable).
    std::vector<Variable> trainable_variables() const;
    std::size_t count_params() const;

    /// A table as Keras prints it: layer (kind), output shape, parameters, dtype policy, configuration;
    /// then the totals (trainable and not). logic_error before build.
    std::string summary() const;

    /// The layers, in the order they were tracked.
    const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
    /// The layer named `name`; std::invalid_argument listing the names when there is none.
    Layer& layer(std::string_view name) const;

    /// Keeps the optimizer (shared with the caller, who may keep a handle to read its loss scale), the
    /// loss and the metrics (losses.hpp, metrics.hpp) for fit and evaluate. std::invalid_argument for a
    /// null optimizer, an unknown name, "accuracy" under a loss that compares values, or a cross-entropy
    /// on logits (a loss by name) for a Sequential whose last layer ends in softmax or sigmoid.
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

    /// One training step on one batch, as fit runs it (fit.hpp: models::train_step, the forward pass, the
    /// scaled loss, the gradients and the update). Override it, as Keras's Model.train_step, to train
    /// differently. FitOptions::train_step, when set, takes precedence over it; with
    /// FitOptions::accumulate_steps > 1 fit runs its own accumulating step instead (fit.hpp).
    virtual TrainStepResult train_step(const TrainStep& step);

    /// Whether each layer takes the previous one's output, and only it (Sequential): what per-layer loss
    /// scaling needs (amp/layer_scales.hpp). A model of your own is not one unless it says so.
    virtual bool layers_form_a_chain() const { return false; }

  protected:
    /// `name` titles the summary ("model" when empty).
    explicit Model(std::string name = "model");

    /// The forward pass on a batch (batch axis first, the input as given). Pass `context` on to every layer
    /// call: it carries training, the dropout generator and, during build, what builds the layers.
    virtual Tensor call(const Tensor& x, const CallContext& context) = 0;

    /// Makes `layer` one of the model's layers and returns it, at an address that stays valid for the
    /// model's life. An unnamed layer gets its kind's snake_case name, numbered ("dense", "dense_1", ...);
    /// a name already taken is an std::invalid_argument; a built layer or one added after build is a
    /// std::logic_error.
    Layer& track(std::unique_ptr<Layer> layer);
    template <std::derived_from<Layer> L>
    L& track(L layer) {
        return static_cast<L&>(track(std::unique_ptr<Layer>(std::make_unique<L>(std::move(layer)))));
    }

    /// How build() builds the layers; returns the output example shape. The default runs call() on a batch
    /// of one zero example with a BuildScope.
    virtual Shape build_layers(const Shape& input_shape, Rng& init_rng);

  private:
    std::string name_;
    std::vector<std::unique_ptr<Layer>> layers_;
    Shape input_shape_;
    Shape output_shape_;
    bool built_ = false;
    std::shared_ptr<optim::Optimizer> optimizer_;
    std::optional<Loss> loss_;
    std::vector<Metric> metrics_;
    TrainingState state_;
};

} // namespace mixprec::models
