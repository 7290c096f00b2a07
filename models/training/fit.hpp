#pragma once
/// The Keras loop: compile a Sequential with an optimizer, then fit, evaluate and predict on datasets.
///
///   amp::LossScaleOptimizer opt{std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3})};
///   models::ProgressBar progress;
///   models::fit(model, opt, train, {.epochs = 5, .batch_size = 128, .validation = &test,
///                                   .callbacks = {&progress}});
///
/// One step: the batch's examples (in a seeded shuffled order) → forward with training = true → mean
/// sparse categorical cross-entropy of the logits (float32) → scaled by the LossScaleOptimizer if the
/// optimizer is one → gradients of the trainable variables → optimizer.apply. A step whose gradients are
/// not finite is skipped by the LossScaleOptimizer (and still counts as a step).
///
/// Everything fit needs to continue a run lives in the model's variables, the optimizer and the
/// TrainingState, so a run restored from a checkpoint continues exactly as the run that was saved.

#include <mixprec/models/data/dataset.hpp>
#include <mixprec/models/training/callback.hpp>
#include <mixprec/models/training/sequential.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mixprec::models {

struct FitOptions {
    std::int64_t epochs = 1;             ///< ≥ 1: fit ends when state.epoch reaches it
    std::size_t batch_size = 32;         ///< ≥ 1; the last batch of an epoch may be smaller
    bool shuffle = true;                 ///< a new seeded order every epoch
    std::uint64_t seed = 0;              ///< seeds the shuffling and dropout generators of a fresh run
    std::int64_t max_steps = 0;          ///< > 0: stop once state.step reaches it
    const Dataset* validation = nullptr; ///< evaluated after every epoch, in batches of batch_size
    std::vector<Callback*> callbacks{};  ///< called in order
    /// Called with each step's (scaled) gradients before apply, e.g. to inject an inf for testing.
    std::function<void(std::int64_t step, std::vector<autodiff::Tensor>& gradients)> gradient_hook{};
};

struct Evaluation {
    double loss = 0;      ///< mean cross-entropy over the examples
    double accuracy = 0;  ///< fraction of examples whose largest logit is the label
};

/// Trains `model` (built, with input shape = data's example shape) on `data` from where `state` says
/// (a fresh state starts at epoch 0 and seeds its generators from options.seed). Returns the logs of the
/// epochs completed by this call. std::invalid_argument for bad options or a dataset that does not fit
/// the model (naming both shapes).
std::vector<EpochLogs> fit(Sequential& model, optim::Optimizer& optimizer, const Dataset& data,
                           TrainingState& state, const FitOptions& options);

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
