#pragma once
/// The Keras loop: compile a Sequential with an optimizer, then fit, evaluate and predict on datasets.
///
///   amp::LossScaleOptimizer opt{std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3})};
///   models::ProgressBar progress;
///   models::fit(model, opt, train, {.epochs = 5, .batch_size = 128, .validation = &test,
///                                   .callbacks = {&progress}});
///
/// One step (train_step, which FitOptions::train_step may replace): the batch's examples (in a seeded
/// shuffled order) → forward with training = true → mean sparse categorical cross-entropy of the logits
/// (float32) → optimizer.scale_loss (× S for a LossScaleOptimizer, identity otherwise) → gradients of the
/// trainable variables → optimizer.apply. A step whose gradients are not finite is skipped by the
/// LossScaleOptimizer (and still counts as a step).
///
/// Everything fit needs to continue a run lives in the model's variables, the optimizer and the
/// TrainingState, so a run restored from a checkpoint continues exactly as the run that was saved.

#include <mixprec/models/data/dataset.hpp>
#include <mixprec/models/training/callback.hpp>
#include <mixprec/models/training/sequential.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace mixprec::models {

/// One batch, as fit hands it to a train step.
struct TrainStep {
    Sequential& model;
    optim::Optimizer& optimizer;
    const std::vector<autodiff::Variable>& variables; ///< the model's trainable variables
    const autodiff::Tensor& x;                        ///< (batch, example shape...)
    std::span<const std::int32_t> labels;             ///< (batch)
    std::int64_t step;                                ///< this step's number, from 1 across epochs
    Rng& dropout_rng;                                 ///< the run's dropout generator
};

/// What a train step tells fit.
struct TrainStepResult {
    double loss = 0;         ///< the batch's mean loss, unscaled
    autodiff::Tensor logits; ///< (batch, classes): fit counts the correct predictions from them
    bool applied = true;     ///< false: the optimizer skipped the step
};

/// Called with a step's number and its (scaled) gradients before apply, e.g. to inject an inf for testing.
using GradientHook = std::function<void(std::int64_t step, std::vector<autodiff::Tensor>& gradients)>;

/// fit's step (see the file comment); `hook`, if set, sees the gradients before apply.
TrainStepResult train_step(const TrainStep& step, const GradientHook& hook = {});

struct FitOptions {
    std::int64_t epochs = 1;             ///< ≥ 1: fit ends when state.epoch reaches it
    std::size_t batch_size = 32;         ///< ≥ 1; the last batch of an epoch may be smaller
    bool shuffle = true;                 ///< a new seeded order every epoch
    std::uint64_t seed = 0;              ///< seeds the shuffling and dropout generators of a fresh run
    std::int64_t max_steps = 0;          ///< > 0: stop once state.step reaches it
    const Dataset* validation = nullptr; ///< evaluated after every epoch, in batches of batch_size
    std::vector<Callback*> callbacks{};  ///< called in order
    GradientHook gradient_hook{};        ///< passed to train_step
    /// Replaces train_step (then gradient_hook is the replacement's to call, or not), as overriding
    /// Model.train_step does in Keras: a custom loss, several optimizers, gradient accumulation.
    std::function<TrainStepResult(const TrainStep&)> train_step{};
};

struct Evaluation {
    double loss = 0;     ///< mean cross-entropy over the examples
    double accuracy = 0; ///< fraction of examples whose largest logit is the label
};

/// Trains `model` (built, with input shape = data's example shape) on `data` from where `state` says
/// (a fresh state starts at epoch 0 and seeds its generators from options.seed). Returns the logs of the
/// epochs completed by this call. std::invalid_argument for bad options or a dataset that does not fit
/// the model (naming both shapes).
std::vector<EpochLogs> fit(Sequential& model, optim::Optimizer& optimizer, const Dataset& data, TrainingState& state,
                           const FitOptions& options);

/// Loss and accuracy on `data`, in batches, in order, with training = false.
Evaluation evaluate(Sequential& model, const Dataset& data, std::size_t batch_size = 256);

/// Float32 logits (size, classes) for every example of `data`, in order.
autodiff::Tensor predict(Sequential& model, const Dataset& data, std::size_t batch_size = 256);

/// 0, 1, ..., n-1 in a random order drawn from `rng` (Fisher-Yates, one draw per element from the last):
/// the order fit gives an epoch, so code that drives its own loop can reproduce it.
std::vector<std::size_t> shuffled_order(std::size_t n, Rng& rng);

/// The fraction of rows of `logits` (batch, classes) whose largest entry is at the label (first on ties).
double accuracy(const autodiff::Tensor& logits, std::span<const std::int32_t> labels);

/// A hex digest (64-bit FNV-1a) of the bytes of every variable's float32 master, in order: two runs
/// that end with the same digest ended with the same weights.
std::string weights_digest(const std::vector<autodiff::Variable>& variables);

} // namespace mixprec::models
