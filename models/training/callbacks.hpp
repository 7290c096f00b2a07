#pragma once
/// The callbacks fit comes with, as Keras's: a progress bar, checkpoints (ModelCheckpoint), automatic
/// resumption after an interruption (BackupAndRestore), a JSON-lines log, TerminateOnNaN and a monitor of
/// the loss scale.

#include <mixprec/models/io/checkpoint.hpp>
#include <mixprec/models/training/callback.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iosfwd>
#include <optional>
#include <string>

namespace mixprec::models {

/// Keras's progress bar: "Epoch 2/5" then
///   " 312/469 ━━━━━━━━━━━━━╺━━━━━━ 4s 13ms/step - accuracy: 0.8711 - loss: 0.3570 - loss_scale: 32768 - skipped: 1"
/// redrawn in place (at most 10 times a second) when the stream is a terminal; otherwise one line per
/// epoch, when it ends. The epoch's line ends with the validation figures ("test_accuracy").
class ProgressBar final : public Callback {
  public:
    /// `interactive`: redraw in place; by default, whether standard output is a terminal.
    explicit ProgressBar(std::ostream& out, std::optional<bool> interactive = std::nullopt);
    ProgressBar();
    void on_epoch_begin(FitContext& context, std::int64_t epoch) override;
    void on_step_end(FitContext& context, const StepLogs& logs) override;
    void on_epoch_end(FitContext& context, const EpochLogs& logs) override;
    /// Finishes the line of an epoch that training left before its end.
    void on_train_end(FitContext& context, bool completed) override;

  private:
    std::string line(const StepLogs& logs) const;

    std::ostream& out_;
    bool interactive_;
    std::chrono::steady_clock::time_point epoch_start_{}, last_draw_{};
    std::int64_t steps_this_epoch_ = 0;
    double loss_sum_ = 0, examples_ = 0;
    std::vector<double> metric_sums_; // the epoch's Σ metric × examples, in the order of StepLogs::metrics
    std::int64_t skipped_ = 0;
    StepLogs last_{};
};

/// Saves a checkpoint (model, optimizer, training state) every `every_steps` steps (0: never), at the
/// end of every epoch, and when training ends between those points, so a stopped run can be resumed.
class ModelCheckpoint final : public Callback {
  public:
    ModelCheckpoint(std::filesystem::path path, std::int64_t every_steps = 0, SaveOptions options = {});
    void on_step_end(FitContext& context, const StepLogs& logs) override;
    void on_epoch_end(FitContext& context, const EpochLogs& logs) override;
    void on_train_end(FitContext& context, bool completed) override;
    std::int64_t saves() const { return saves_; }

  private:
    void save(FitContext& context);

    std::filesystem::path path_;
    std::int64_t every_steps_;
    SaveOptions options_;
    std::int64_t last_saved_step_ = -1;
    std::int64_t saves_ = 0;
};

/// Keras's BackupAndRestore: keeps a backup checkpoint at `path` (every `every_steps` steps, at every
/// epoch end, and when fit stops before its end); when fit starts and the backup exists, training resumes
/// from it, as if never interrupted; when fit completes, the backup is deleted.
class BackupAndRestore final : public Callback {
  public:
    explicit BackupAndRestore(std::filesystem::path path, std::int64_t every_steps = 0);
    void on_train_begin(FitContext& context) override;
    void on_step_end(FitContext& context, const StepLogs& logs) override;
    void on_epoch_end(FitContext& context, const EpochLogs& logs) override;
    void on_train_end(FitContext& context, bool completed) override;
    /// Whether the last fit resumed from a backup.
    bool restored() const { return restored_; }

  private:
    std::filesystem::path path_;
    std::int64_t every_steps_;
    bool restored_ = false;
};

/// The summary of a run that the JSON log ends with (and the trainer prints).
struct RunSummary {
    std::int64_t steps = 0; ///< steps done in total (a resumed run counts the earlier ones)
    std::int64_t skipped_steps = 0;
    float loss_scale = 1; ///< the scale after the last step
    std::optional<double> test_accuracy;
    double samples_per_second = 0; ///< training examples (of every rank) per second of training time
    double peak_rss_mib = 0;       ///< this process's peak resident memory
    std::string weights_digest;    ///< weights_digest(model.variables())
    std::string isa;               ///< the instruction-set level in use (autodiff/tensor/isa.hpp)
    /// Data-parallel training: StepLogs::rank_digests of the last step (fit always gathers them there;
    /// empty in one process).
    std::vector<std::uint64_t> rank_digests{};
};

/// One JSON object per line: per step {"step","epoch","loss","loss_scale","skipped","grad_norm",
/// "learning_rate","seconds" (the step's training time: from the end of the last step's logging, or of an
/// evaluation, to the end of this step)}, "telemetry" (telemetry_json.hpp) on steps that recorded it and,
/// in data-parallel training, "rank_digests" (every rank's state digest, 16 hex digits each), per epoch
/// {"event":"epoch","epoch","train_loss","test_accuracy", "train_<metric>" for every compiled metric,
/// "test_loss" and "test_<metric>" with validation data, "seconds", "samples_per_second"} and, when
/// training ends, {"event":"end", RunSummary's fields}. Epochs count from 1;
/// the loss is unscaled and loss_scale is the scale the step used; non-finite numbers are written as null.
/// std::runtime_error naming the path if the file cannot be opened.
class JsonLinesLogger final : public Callback {
  public:
    /// `append`: add to an existing log (a resumed run) instead of starting a new one. An empty path writes
    /// nothing and only measures the summary.
    explicit JsonLinesLogger(const std::filesystem::path& path, bool append = false);
    void on_train_begin(FitContext& context) override;
    void on_step_end(FitContext& context, const StepLogs& logs) override;
    void on_epoch_end(FitContext& context, const EpochLogs& logs) override;
    void on_train_end(FitContext& context, bool completed) override;
    const RunSummary& summary() const { return summary_; }

  private:
    std::ofstream out_;
    std::filesystem::path path_;
    std::chrono::steady_clock::duration training_time_{};
    std::chrono::steady_clock::time_point step_start_{};
    std::int64_t examples_ = 0;
    RunSummary summary_;
};

/// Stops training after a step whose loss is NaN or infinite (the loss itself, not a skipped step's
/// gradients: those are the loss scaler's business) and says so on `out`.
class TerminateOnNaN final : public Callback {
  public:
    explicit TerminateOnNaN(std::ostream& out);
    TerminateOnNaN();
    void on_step_end(FitContext& context, const StepLogs& logs) override;
    bool terminated() const { return terminated_; }

  private:
    std::ostream& out_;
    bool terminated_ = false;
};

/// Reports on `out` each time the loss scale moves ("step 1234: loss scale 32768 -> 16384 (overflow)")
/// and warns when more than `warn_fraction` of the last `window` steps were skipped.
class LossScaleMonitor final : public Callback {
  public:
    explicit LossScaleMonitor(std::ostream& out, std::int64_t window = 100, double warn_fraction = 0.1);
    void on_step_end(FitContext& context, const StepLogs& logs) override;
    std::int64_t changes() const { return changes_; }

  private:
    std::ostream& out_;
    std::int64_t window_;
    double warn_fraction_;
    std::int64_t window_skips_ = 0, window_steps_ = 0, changes_ = 0;
};

/// This process's peak resident memory in MiB (getrusage).
double peak_rss_mib();

} // namespace mixprec::models
