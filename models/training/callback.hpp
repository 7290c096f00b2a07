#pragma once
/// Callback: hooks into fit(), as Keras's callbacks. A callback sees the model, the optimizer and the
/// training state through FitContext, and can ask fit to stop after the current step.

#include <mixprec/models/io/training_state.hpp>

#include <cstdint>
#include <optional>

namespace mixprec::optim {
class Optimizer;
}

namespace mixprec::models {

class Sequential;

/// One training step, as fit reports it.
struct StepLogs {
    std::int64_t step = 0;  ///< 1-based, counted across epochs; skipped steps count
    std::int64_t epoch = 0; ///< 0-based
    std::int64_t batch = 0; ///< 1-based position in the epoch
    std::int64_t batches_per_epoch = 0;
    std::size_t batch_size = 0; ///< examples in this batch (the last one may be smaller)
    double loss = 0;            ///< unscaled, float32 as computed
    double accuracy = 0;        ///< of this batch
    float loss_scale = 1;       ///< the scale this step used (1 without a LossScaleOptimizer)
    bool skipped = false;       ///< the gradients had an inf or NaN and nothing was updated
    double gradient_norm = 0;   ///< global L2 norm of the unscaled gradients (inf if skipped)
    float learning_rate = 0;    ///< the rate this step used
};

/// One epoch, as fit reports it.
struct EpochLogs {
    std::int64_t epoch = 0; ///< 0-based
    std::int64_t last_step = 0;
    double train_loss = 0; ///< mean over the epoch's examples
    double train_accuracy = 0;
    std::optional<double> validation_loss;
    std::optional<double> validation_accuracy;
    double seconds = 0; ///< training time of the epoch (evaluation excluded)
    double samples_per_second = 0;
};

/// What a callback may read and touch.
struct FitContext {
    Sequential& model;
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
