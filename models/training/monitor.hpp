#pragma once
/// Callbacks that watch one figure of the epoch logs and act when it stops improving, as Keras's:
/// EarlyStopping ends training, ReduceLROnPlateau lowers the learning rate. Both judge improvement with
/// one Monitor (mode, min_delta, best value, wait counter).
///
///   models::EarlyStopping stop({.monitor = "val_loss", .patience = 3, .restore_best_weights = true});
///   models::ReduceLROnPlateau plateau({.factor = 0.5, .patience = 2, .min_lr = 1e-5});
///   models::fit(model, opt, train, state, {.epochs = 50, .validation = &test, .callbacks = {&plateau, &stop}});
///
/// A callback's own state (best value, wait and cooldown counters, EarlyStopping's best weights) is not
/// part of checkpoints, as in Keras: every fit starts it afresh (on_train_begin), a resumed run included.
/// Nor is the optimizer's learning rate: a run resumed in a new process starts from the rate its optimizer
/// was built with, not from the one ReduceLROnPlateau had reached.

#include <mixprec/models/training/callback.hpp>

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::models {

/// Whether one figure improves, Keras's MonitorCallback as a member: which way is better, by how much,
/// the best value of the run and a wait counter (each callback says when it counts and resets it).
///
/// Direction: mode "min" or "max"; "auto" is "max" when the monitor's name contains "acc" ("accuracy",
/// "val_accuracy", "sparse_categorical_accuracy", "acc"), "min" otherwise ("loss", "val_loss", "mae", ...).
/// `value` improves on `reference` when (min) value + min_delta < reference, (max) value - min_delta >
/// reference; any value but NaN improves on no reference, and NaN never improves (Keras would take a NaN
/// first value as the best and then never improve on it).
class Monitor {
  public:
    /// `owner` names the callback in messages and warnings. std::invalid_argument naming the option for an
    /// empty `monitor`, a `mode` other than "auto", "min" and "max", or a `min_delta` negative or not finite.
    Monitor(std::string owner, std::string monitor, std::string_view mode, double min_delta, std::ostream& warnings);

    const std::string& monitor() const { return monitor_; }
    bool maximizes() const { return maximize_; }

    /// A new run: no best value, wait 0, and the missing-figure warning armed again.
    void reset();
    /// The monitored figure of `logs`; when they have none (e.g. "val_loss" without validation data),
    /// nullopt, and a warning naming the figures they do have, written once per run.
    std::optional<double> read(const EpochLogs& logs);

    bool improves(double value, std::optional<double> reference) const;
    /// If `value` improves on best(), it becomes best() and true is returned.
    bool record(double value);
    std::optional<double> best() const { return best_; }

    std::int64_t wait() const { return wait_; }
    void count() { ++wait_; }
    void reset_wait() { wait_ = 0; }

  private:
    std::string owner_, monitor_;
    bool maximize_ = false;
    double min_delta_ = 0;
    std::ostream& warnings_;
    bool warned_ = false;
    std::optional<double> best_;
    std::int64_t wait_ = 0;
};

struct EarlyStoppingOptions {
    std::string monitor = "val_loss"; ///< a name EpochLogs::get knows
    double min_delta = 0;             ///< ≥ 0: a smaller change is no improvement
    std::int64_t patience = 0;        ///< ≥ 0: epochs without improvement before stopping
    std::string mode = "auto";        ///< "auto", "min" or "max" (Monitor)
    /// If set (finite), only an epoch that also beats it resets the wait.
    std::optional<double> baseline{};
    /// Keep a copy of the float32 masters of model.variables() at the best epoch, put back at train end.
    bool restore_best_weights = false;
    std::int64_t start_from_epoch = 0; ///< ≥ 0: epochs before this one are not monitored
};

/// Keras 3's EarlyStopping. At each on_epoch_end, with v = logs.get(monitor) and e = logs.epoch:
///   1. no v: warn (once per run), nothing else; e < start_from_epoch: nothing;
///   2. restore_best_weights and no copy yet: copy the masters, best epoch = e;
///   3. wait += 1;
///   4. if v improves on the best (Monitor): best = v, best epoch = e, copy the masters if
///      restore_best_weights, and wait = 0 unless a baseline is set and v does not improve on it; done
///      (an improving epoch never stops training, even one that does not beat the baseline);
///   5. otherwise, if wait ≥ patience: stopped_epoch() = e and context.stop_requested = true (Keras also
///      never stops at epoch 0, which matters only when epoch 0's figure is NaN: here it may).
/// With patience p and a steady monitor, training stops at the end of the p-th epoch without improvement
/// (the first, for p = 0). Weights are restored at on_train_end, whatever ended training (this callback,
/// another one, max_steps or the last epoch), as Keras 3 does; Keras 2 restored only after its own stop.
/// The copies are of every variable (non-trainable ones too), restored with assign, bit for bit; the
/// optimizer's slots are not restored. Checkpoints taken at the stopping epoch's end hold its own weights,
/// not the restored ones (ModelCheckpoint does not save again at train end when no step was taken since).
class EarlyStopping final : public Callback {
  public:
    using Options = EarlyStoppingOptions;
    /// Warnings go to std::cerr. std::invalid_argument naming a bad option.
    explicit EarlyStopping(Options options = {});
    EarlyStopping(Options options, std::ostream& warnings);

    void on_train_begin(FitContext& context) override;
    void on_epoch_end(FitContext& context, const EpochLogs& logs) override;
    void on_train_end(FitContext& context, bool completed) override;

    /// The epoch (0-based) at whose end this callback stopped training; nullopt if it did not.
    std::optional<std::int64_t> stopped_epoch() const { return stopped_epoch_; }
    /// The epoch of best(), nullopt before one was seen.
    std::optional<std::int64_t> best_epoch() const { return best_epoch_; }
    std::optional<double> best() const { return monitor_.best(); }
    std::int64_t wait() const { return monitor_.wait(); }
    const Options& options() const { return options_; }

  private:
    void keep_weights(const FitContext& context);

    Options options_;
    Monitor monitor_;
    std::optional<std::int64_t> stopped_epoch_, best_epoch_;
    std::vector<autodiff::Tensor> best_weights_; // float32 copies of model.variables(), in order
};

struct ReduceLROnPlateauOptions {
    std::string monitor = "val_loss";
    double factor = 0.1;        ///< in (0, 1): new rate = old rate · factor
    std::int64_t patience = 10; ///< ≥ 0
    std::string mode = "auto";  ///< "auto", "min" or "max" (Monitor)
    double min_delta = 1e-4;    ///< ≥ 0
    std::int64_t cooldown = 0;  ///< ≥ 0: epochs after a reduction during which wait stays 0
    double min_lr = 0;          ///< ≥ 0: the rate never goes below it
};

/// Keras 3's ReduceLROnPlateau, for an optimizer with a constant learning rate (a schedule is refused
/// with std::invalid_argument at on_train_begin, and when a reduction is due). At each on_epoch_end,
/// with v = logs.get(monitor):
///   1. no v: warn (once per run), nothing else;
///   2. if cooldown left > 0: cooldown left -= 1, wait = 0;
///   3. if v improves on the best (Monitor): best = v, wait = 0;
///   4. otherwise, if no cooldown is left: wait += 1, and if wait ≥ patience and the rate lr >
///      float(min_lr): rate = float(max(lr · factor, min_lr)) (in double), cooldown left = cooldown,
///      wait = 0. At the floor nothing changes and wait keeps counting.
class ReduceLROnPlateau final : public Callback {
  public:
    using Options = ReduceLROnPlateauOptions;
    /// Warnings go to std::cerr. std::invalid_argument naming a bad option.
    explicit ReduceLROnPlateau(Options options = {});
    ReduceLROnPlateau(Options options, std::ostream& warnings);

    void on_train_begin(FitContext& context) override;
    void on_epoch_end(FitContext& context, const EpochLogs& logs) override;

    std::int64_t reductions() const { return reductions_; } ///< this run
    std::optional<double> best() const { return monitor_.best(); }
    std::int64_t wait() const { return monitor_.wait(); }
    std::int64_t cooldown_left() const { return cooldown_left_; }
    const Options& options() const { return options_; }

  private:
    Options options_;
    Monitor monitor_;
    std::int64_t cooldown_left_ = 0;
    std::int64_t reductions_ = 0;
};

} // namespace mixprec::models
