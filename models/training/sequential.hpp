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
///
/// Everything else (variables, summary, compile, fit, evaluate, predict, the training state) is Model's
/// (model.hpp); a model that is not a stack subclasses Model.
///
/// call() offers each layer the one after it (Layer::call_fused): a Conv2D and a 2×2 MaxPool2D after it
/// run as one autodiff::conv2d_max_pool, with the same bits, where nothing needs the convolution's own
/// output (rounding telemetry and per-layer loss scaling see each layer, so they call the two in turn).

#include <mixprec/models/training/model.hpp>

#include <concepts>
#include <memory>
#include <utility>

namespace mixprec::models {

class Sequential : public Model {
  public:
    Sequential() : Model("sequential") {}
    template <std::derived_from<Layer>... L>
    explicit Sequential(L... layers) : Model("sequential") {
        (add(std::move(layers)), ...);
    }

    /// Appends a layer (before build); an unnamed layer gets its kind's snake_case name, numbered
    /// ("dense", "dense_1", ...); a name already taken is an std::invalid_argument.
    Sequential& add(std::unique_ptr<Layer> layer) {
        track(std::move(layer));
        return *this;
    }
    template <std::derived_from<Layer> L>
    Sequential& add(L layer) {
        track(std::move(layer));
        return *this;
    }

  protected:
    /// Each layer in turn.
    Tensor call(const Tensor& x, const CallContext& context) override;
    bool layers_form_a_chain() const override { return true; }
    /// Each layer in turn, for the shape the one before gives (no forward pass).
    Shape build_layers(const Shape& input_shape, Rng& init_rng) override;
};

} // namespace mixprec::models
