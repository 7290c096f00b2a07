#pragma once
/// CSVLogger: one row per epoch in a CSV file, as Keras's.
///
///   epoch,loss,accuracy,val_loss,val_accuracy,learning_rate
///   0,0.6931471805599453,0.5,0.6,0.55,0.01
///
/// Columns: "epoch" (0-based, as Keras), "loss", each of logs.metrics by name, "val_loss" and "val_" and
/// each of logs.validation_metrics when present (the order of figure_names, monitor.hpp), then
/// "learning_rate". They are fixed by the first epoch of each fit: a figure a later epoch lacks is
/// written "NA" (Keras's placeholder), one that appears later is not written.
///
/// Numbers are written as Python's repr writes a float (what Keras's file holds): the fewest digits that
/// read back to the same double, a fixed point for exponents in [-4, 16) with ".0" on whole numbers
/// ("3.0", "0.0001"), otherwise an exponent of at least two digits ("1e-05", "1.5e+16"); "nan", "inf" and
/// "-inf" for the others. The learning rate is the float32 of the epoch's last step (StepLogs::learning_rate;
/// the optimizer's current_learning_rate() when no step of the epoch was seen), written with the fewest
/// digits that read back to that float32 ("0.01", where Keras's float64 would show 0.009999999776482582).
/// Names holding the separator, a quote or a line break are quoted as Python's csv module does; lines end
/// with "\n" (Python's csv writes "\r\n").
///
/// The file is opened at on_train_begin: truncated, or with `append` added to (a resumed run), and then the
/// header row is written only if the file was empty or absent. Each row is flushed as it is written; the
/// file is closed at on_train_end. std::runtime_error naming the path when the file cannot be opened or
/// written. The logger's own state (the columns) is not part of checkpoints, as in Keras.

#include <mixprec/models/training/callback.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace mixprec::models {

class CSVLogger final : public Callback {
  public:
    /// std::invalid_argument for a separator that is a quote or a line break.
    explicit CSVLogger(std::filesystem::path path, char separator = ',', bool append = false);

    void on_train_begin(FitContext& context) override;
    void on_epoch_begin(FitContext& context, std::int64_t epoch) override;
    void on_step_end(FitContext& context, const StepLogs& logs) override;
    void on_epoch_end(FitContext& context, const EpochLogs& logs) override;
    void on_train_end(FitContext& context, bool completed) override;

    const std::filesystem::path& path() const { return path_; }

  private:
    void open();
    std::string field(const std::string& text) const;

    std::filesystem::path path_;
    char separator_;
    bool append_;
    std::ofstream out_;
    bool header_due_ = true;
    std::vector<std::string> columns_; // the figures after "epoch", without "learning_rate"
    std::optional<float> step_rate_;   // the rate of the epoch's last step seen
};

/// `value` as Python's repr(float) writes it: "0.1", "3.0", "1e-05", "nan", "-inf".
std::string python_float_text(double value);
/// The float32 `value` with the fewest digits that read back to it, laid out as python_float_text.
std::string python_float_text(float value);

} // namespace mixprec::models
