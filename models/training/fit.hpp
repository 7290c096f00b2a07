#pragma once
/// The Keras loop: compile a model (a Sequential or your own Model) with an optimizer, then fit, evaluate
/// and predict on datasets.
///
///   amp::LossScaleOptimizer opt{std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3})};
///   models::ProgressBar progress;
///   models::fit(model, opt, train, {.epochs = 5, .batch_size = 128, .validation = &test,
///                                   .callbacks = {&progress}});
///
/// One step (train_step, which FitOptions::train_step may replace): the batch's examples (in a seeded
/// shuffled order) → forward with training = true → the loss of the outputs against the targets
/// (float32; by default the sparse categorical cross-entropy of logits) → optimizer.scale_loss (× S for a
/// LossScaleOptimizer, identity otherwise) → gradients of the trainable variables → optimizer.apply. A
/// step whose gradients are not finite is skipped by the LossScaleOptimizer (and still counts as a step).
///
/// Data-parallel training (the optimizer's communicator(), set by amp::LossScaleOptimizer::set_communicator,
/// with more than one rank): every rank runs fit alike, on the same data and options. batch_size stays the
/// global batch: each batch of the shuffled order is split into contiguous shares, one per rank in rank
/// order (optim::share_begin), each rank computes its share's gradients and the optimizer averages them
/// across ranks. The step's loss and metrics, the epoch's figures and the validation (shared out the same
/// way) are summed across ranks, so every rank's callbacks see the same logs; StepLogs::rank_digests holds
/// every rank's state digest after each step (rank_digest_every). The order of the examples does not depend on the number of
/// ranks, so a checkpoint resumes with any number of them. Dropout draws from a generator per rank and
/// step, derived from the run's. Telemetry counts what this rank rounded. Callbacks that write files belong
/// on rank 0 only; a callback that stops the run must run on every rank (it sees the same logs there), or
/// the ranks that go on would wait for the others in their next collective.
///
/// With accumulate_steps = N > 1, a step runs forward and backward on N consecutive batches, adds their
/// (scaled) gradients in float32, divides the sums by the number of batches (the mean, as Keras; the last
/// step of an epoch may have fewer) and applies them once (optimizer.apply_float32). The step's loss and
/// metrics are over all its examples. Steps, and so checkpoints, end at whole groups of batches, so a
/// resumed run accumulates exactly as the original did.
///
/// Everything fit needs to continue a run lives in the model's variables, the optimizer and the
/// TrainingState, so a run restored from a checkpoint continues exactly as the run that was saved.

#include <mixprec/models/data/dataset.hpp>
#include <mixprec/models/training/callback.hpp>
#include <mixprec/models/training/losses.hpp>
#include <mixprec/models/training/metrics.hpp>
#include <mixprec/models/training/sequential.hpp> // fit.hpp gives the whole Keras loop, models included

#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mixprec::models {

/// Called with a step's number and its (scaled) gradients before apply, e.g. to inject an inf for testing.
using GradientHook = std::function<void(std::int64_t step, std::vector<autodiff::Tensor>& gradients)>;

/// One batch, as fit hands it to a train step.
struct TrainStep {
    Model& model;
    optim::Optimizer& optimizer;
    const std::vector<autodiff::Variable>& variables; ///< the model's trainable variables
    const autodiff::Tensor& x;                        ///< (batch, example shape...)
    const autodiff::Tensor& y;                        ///< (batch, target shape...): float32 targets
    const Loss& loss;                                 ///< the loss fit minimizes
    std::int64_t step;                                ///< this step's number, from 1 across epochs
    Rng& dropout_rng;                                 ///< the run's dropout generator
    const GradientHook* gradient_hook = nullptr;      ///< FitOptions::gradient_hook, if set
    /// What the loss is multiplied by before optimizer.scale_loss. Data-parallel training (see fit) gives
    /// each rank its share of the global batch × the ranks, so that the ranks' averaged gradients are
    /// those of the global batch's mean loss: 1 when the shares are equal (and in one process), 0 for a
    /// rank whose share is empty. A replacement train step must honour it (batch_gradients does).
    float loss_weight = 1;
};

/// What a train step tells fit.
struct TrainStepResult {
    double loss = 0;         ///< the batch's mean loss, unscaled
    autodiff::Tensor y_pred; ///< (batch, output shape...): fit computes the metrics from them
    bool applied = true;     ///< false: the optimizer skipped the step
};

/// One batch's forward and backward pass, without the update.
struct BatchGradients {
    double loss = 0;                       ///< the batch's mean loss, unscaled
    autodiff::Tensor y_pred;               ///< the model's outputs
    std::vector<autodiff::Tensor> grads{}; ///< of step.variables, scaled as optimizer.scale_loss scales the loss
};

/// The forward pass with training = true, the loss and the (scaled) gradients of step.variables; with an
/// amp::StepTelemetry active, the tape counts its roundings and the step's telemetry is recorded there.
BatchGradients batch_gradients(const TrainStep& step);

/// fit's step (see the file comment); `hook`, if set, sees the gradients before apply.
TrainStepResult train_step(const TrainStep& step, const GradientHook& hook = {});

/// A callback as fit takes it: borrowed (`&progress`: it must outlive the fit call) or shared
/// (`std::make_shared<EarlyStopping>(...)`: fit's options keep it alive).
class CallbackRef {
  public:
    CallbackRef(Callback* callback) : callback_(std::shared_ptr<Callback>(), callback) {}
    template <std::derived_from<Callback> C>
    CallbackRef(std::shared_ptr<C> callback) : callback_(std::move(callback)) {}
    Callback* get() const { return callback_.get(); }
    Callback* operator->() const { return callback_.get(); }

  private:
    std::shared_ptr<Callback> callback_; // owns nothing when borrowed
};

struct FitOptions {
    /// ≥ 1: the epochs this call trains, from where the training state is (an epoch left unfinished
    /// counts as the first of them), so a second fit({.epochs = 1}) trains one more epoch, as in Keras.
    /// With initial_epoch: the number of the epoch to end at instead.
    std::int64_t epochs = 1;
    /// Keras's initial_epoch, for continuing a run (after load_checkpoint): then `epochs` counts from the
    /// run's start. It must be the epoch the training state is in; std::invalid_argument otherwise.
    std::optional<std::int64_t> initial_epoch{};
    std::size_t batch_size = 32; ///< ≥ 1; the last batch of an epoch may be smaller
    bool shuffle = true;         ///< a new seeded order every epoch
    std::uint64_t seed = 0;      ///< seeds the shuffling and dropout generators of a fresh run
    std::int64_t max_steps = 0;  ///< > 0: stop once state.step reaches it
    /// ≥ 1: each step averages the gradients of this many consecutive batches (micro-batches of
    /// batch_size examples) before one optimizer update, as Keras's gradient_accumulation_steps.
    std::int64_t accumulate_steps = 1;
    const Dataset* validation = nullptr; ///< evaluated after every epoch, in batches of batch_size
    /// In [0, 1): holds out the last fraction of `data` (before any shuffling, as Keras's validation_split)
    /// as validation data, training on the examples before them: of n examples, the first ⌈n (1 − split)⌉
    /// train. Not with `validation` (std::invalid_argument), nor when either part would be empty.
    double validation_split = 0;
    std::vector<CallbackRef> callbacks{}; ///< called in order
    GradientHook gradient_hook{};         ///< passed to train_step
    /// Replaces the model's train_step (Model::train_step, models::train_step unless a subclass overrides
    /// it) for this call; then gradient_hook is the replacement's to call, or not (TrainStep::gradient_hook).
    /// A replacement does not work with accumulate_steps > 1 (std::invalid_argument); with
    /// accumulate_steps > 1, fit runs its own accumulating step and calls no train_step, overridden or not.
    std::function<TrainStepResult(const TrainStep&)> train_step{};
    /// The loss; unset: the model's compiled loss (Model::fit), else sparse_categorical_crossentropy
    /// on logits.
    std::optional<Loss> loss{};
    /// The metrics; unset: the model's compiled metrics (Model::fit), else {"accuracy"}.
    std::optional<std::vector<Metric>> metrics{};
    /// > 0: the steps whose number is a multiple of it record rounding telemetry (amp/telemetry.hpp) and
    /// hand it to callbacks in StepLogs::telemetry; other steps count nothing and cost nothing more.
    std::int64_t telemetry_every = 0;
    bool telemetry_histogram = false; ///< and the exponent histograms (about 1 ns per value rounded)
    /// Data-parallel: the steps whose number is a multiple of it, and the run's last step, gather every
    /// rank's state_digest into StepLogs::rank_digests (0: the last step only). A digest reads the whole
    /// state once: about 1 ms for the 670k-parameter mlp with Adam (8 MB), 12% of its 2-rank step.
    std::int64_t rank_digest_every = 1;
};

/// What evaluate measures.
struct EvaluateOptions {
    std::size_t batch_size = 256;
    std::optional<Loss> loss{};                   ///< as FitOptions::loss
    std::optional<std::vector<Metric>> metrics{}; ///< as FitOptions::metrics
    /// Data-parallel: each rank evaluates its contiguous share of the examples and the figures are summed
    /// across ranks (every rank gets them). Null: all of them here.
    optim::Communicator* communicator = nullptr;
};

struct Evaluation {
    double loss = 0; ///< mean loss over the examples
    /// The first accuracy metric (the fraction of examples classified right); NaN without one.
    double accuracy = std::numeric_limits<double>::quiet_NaN();
    Metrics metrics{}; ///< every metric, each the mean over the examples
};

/// Trains `model` (built, with input shape = data's example shape) on `data` from where `state` says
/// (a fresh state starts at epoch 0 and seeds its generators from options.seed). Returns the logs of the
/// epochs completed by this call. std::invalid_argument for bad options or a dataset that does not fit
/// the model (naming both shapes).
std::vector<EpochLogs> fit(Model& model, optim::Optimizer& optimizer, const Dataset& data, TrainingState& state,
                           const FitOptions& options);

/// The loss and the metrics on `data`, in batches, in order, with training = false.
Evaluation evaluate(Model& model, const Dataset& data, const EvaluateOptions& options);
/// The same with the default loss and metrics (sparse categorical cross-entropy on logits, accuracy).
Evaluation evaluate(Model& model, const Dataset& data, std::size_t batch_size = 256);

/// The model's float32 outputs (size, output shape...) for every example of `data`, in order.
autodiff::Tensor predict(Model& model, const Dataset& data, std::size_t batch_size = 256);

/// 0, 1, ..., n-1 in a random order drawn from `rng` (Fisher-Yates, one draw per element from the last):
/// the order fit gives an epoch, so code that drives its own loop can reproduce it.
std::vector<std::size_t> shuffled_order(std::size_t n, Rng& rng);

/// The fraction of rows of `logits` (batch, classes) whose largest entry is at the label (first on ties).
double accuracy(const autodiff::Tensor& logits, std::span<const std::int32_t> labels);

/// The loss and metrics to use: `loss` and `metrics` when set, else the defaults, with each metric
/// resolved for the loss (Metric::resolved_for). std::invalid_argument as resolved_for says.
struct Objective {
    Loss loss;
    std::vector<Metric> metrics;
};
Objective objective(const std::optional<Loss>& loss, const std::optional<std::vector<Metric>>& metrics);

/// A 64-bit digest of everything a step changes: every variable's float32 master and the optimizer's state
/// (optim::Optimizer::state: iterations, slots, loss scale and counters, per-layer and FP8 scales). Two
/// ranks with equal digests hold the same training state.
std::uint64_t state_digest(const std::vector<autodiff::Variable>& variables, const optim::Optimizer& optimizer);

/// A hex digest (64-bit FNV-1a) of the bytes of every variable's float32 master, in order: two runs
/// that end with the same digest ended with the same weights.
std::string weights_digest(const std::vector<autodiff::Variable>& variables);

} // namespace mixprec::models
