#pragma once
/// Callback: hooks into fit(), as Keras's callbacks. A callback sees the model, the optimizer and the
/// training state through FitContext, and can ask fit to stop after the current step.

#include <mixprec/amp/telemetry.hpp>
#include <mixprec/models/io/training_state.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mixprec::optim {
class Optimizer;
}

namespace mixprec::models {

class Model;

/// Named figures in the order they were compiled, e.g. {{"accuracy", 0.91}, {"mae", 0.3}}.
using Metrics = std::vector<std::pair<std::string, double>>;

/// The value of the metric named `name`, if `metrics` has one.
std::optional<double> find_metric(const Metrics& metrics, std::string_view name);

/// One training step, as fit reports it.
struct StepLogs {
    std::int64_t step = 0;  ///< 1-based, counted across epochs; skipped steps count
    std::int64_t epoch = 0; ///< 0-based
    std::int64_t batch = 0; ///< 1-based position in the epoch
    std::int64_t batches_per_epoch = 0;
    std::size_t batch_size = 0; ///< examples in this batch (the last one may be smaller)
    double loss = 0;            ///< unscaled, float32 as computed
    /// Of this batch: the compiled accuracy metric (whichever kind "accuracy" resolved to), NaN without one.
    double accuracy = std::numeric_limits<double>::quiet_NaN();
    Metrics metrics{};        ///< every compiled metric, of this batch
    float loss_scale = 1;     ///< the scale this step used (1 without a LossScaleOptimizer)
    bool skipped = false;     ///< the gradients had an inf or NaN and nothing was updated
    double gradient_norm = 0; ///< global L2 norm of the unscaled gradients (inf if skipped)
    float learning_rate = 0;  ///< the rate this step used
    /// The step's rounding telemetry (amp/telemetry.hpp) on the steps FitOptions::telemetry_every asks
    /// for (summed over the batches of an accumulating step), else null.
    std::shared_ptr<const amp::Telemetry> telemetry{};
    /// Data-parallel training: models::state_digest of every rank after this step, in rank order (equal
    /// when the ranks agree, as they must), on the steps FitOptions::rank_digest_every asks for. Empty in
    /// one process.
    std::vector<std::uint64_t> rank_digests{};
};

/// One epoch, as fit reports it.
struct EpochLogs {
    std::int64_t epoch = 0; ///< 0-based
    std::int64_t last_step = 0;
    double train_loss = 0;                                            ///< mean over the epoch's examples
    double train_accuracy = std::numeric_limits<double>::quiet_NaN(); ///< NaN without an accuracy metric
    Metrics metrics{};                                                ///< every compiled metric, over the epoch
    std::optional<double> validation_loss;
    std::optional<double> validation_accuracy;
    Metrics validation_metrics{}; ///< every compiled metric on the validation data (empty without it)
    double seconds = 0;           ///< training time of the epoch (evaluation excluded)
    double samples_per_second = 0;

    /// A figure by its Keras name: "loss", "val_loss", a metric's name ("accuracy", "mae", ...) or
    /// "val_" and a metric's name; nullopt when this epoch has no such figure.
    std::optional<double> get(std::string_view key) const;
};

/// The names EpochLogs::get answers for `logs`, in this order: "loss", each of logs.metrics, "val_loss"
/// (with validation), "val_" and each of logs.validation_metrics.
std::vector<std::string> figure_names(const EpochLogs& logs);

/// What a callback may read and touch.
struct FitContext {
    Model& model;
    optim::Optimizer& optimizer;
    TrainingState& state;
    std::int64_t epochs = 0;     ///< epochs fit was asked for
    bool stop_requested = false; ///< set to end fit after the current step
    /// The latest validation accuracy: after each epoch, and when fit stops inside an epoch (fit
    /// evaluates then too, so that a run's end always has a figure). Empty without validation data.
    std::optional<double> validation_accuracy{};
};

class Callback {
  public:
    virtual ~Callback() = default;
    /// Before the first step (after a resume, at the resumed position).
    virtual void on_train_begin(FitContext&) {}
    virtual void on_epoch_begin(FitContext&, std::int64_t /*epoch*/) {}
    virtual void on_step_end(FitContext&, const StepLogs&) {}
    /// After the epoch's last step and its validation; state already points at the next epoch.
    virtual void on_epoch_end(FitContext&, const EpochLogs&) {}
    /// After the last step, also when stopped early (`completed` is false then).
    virtual void on_train_end(FitContext&, bool /*completed*/) {}
};

} // namespace mixprec::models
