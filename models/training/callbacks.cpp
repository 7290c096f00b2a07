#include <mixprec/models/training/callbacks.hpp>

#include <mixprec/models/training/fit.hpp>
#include <mixprec/models/training/model_checkpoint.hpp>
#include <mixprec/models/training/telemetry_json.hpp>

#include <mixprec/autodiff/tensor/isa.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace mixprec::models {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

/// "12s", "3m 05s", "1h 02m": durations as the progress bar shows them.
std::string duration_text(double seconds) {
    const auto s = static_cast<long long>(std::llround(std::max(seconds, 0.0)));
    char text[32];
    if (s < 60)
        std::snprintf(text, sizeof text, "%llds", s);
    else if (s < 3600)
        std::snprintf(text, sizeof text, "%lldm %02llds", s / 60, s % 60);
    else
        std::snprintf(text, sizeof text, "%lldh %02lldm", s / 3600, s / 60 % 60);
    return text;
}

/// A JSON number, or null for inf and NaN (JSON has neither).
std::string json_number(double value) {
    if (!std::isfinite(value)) return "null";
    char text[40];
    std::snprintf(text, sizeof text, "%.9g", value);
    return text;
}

/// " - accuracy: 0.8711 - loss: 0.3570": the figures sorted by name, each name after `prefix`.
std::string figures(Metrics values, const char* prefix) {
    std::stable_sort(values.begin(), values.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string out;
    for (const auto& [name, value] : values) {
        char number[32];
        std::snprintf(number, sizeof number, "%.4f", value);
        out += " - ";
        out += prefix;
        out += name;
        out += ": ";
        out += number;
    }
    return out;
}

/// Whether a checkpoint every `every` steps falls on this step. The last step of an epoch is left to
/// on_epoch_end, which saves after the state has moved to the next epoch.
bool due(std::int64_t every, const StepLogs& logs) {
    return every > 0 && logs.step % every == 0 && logs.batch < logs.batches_per_epoch;
}

} // namespace

std::optional<double> find_metric(const Metrics& metrics, std::string_view name) {
    for (const auto& [key, value] : metrics)
        if (key == name) return value;
    return std::nullopt;
}

std::optional<double> EpochLogs::get(std::string_view key) const {
    if (key == "loss") return train_loss;
    if (key == "val_loss") return validation_loss;
    if (key.starts_with("val_")) return find_metric(validation_metrics, key.substr(4));
    return find_metric(metrics, key);
}

std::vector<std::string> figure_names(const EpochLogs& logs) {
    std::vector<std::string> names{"loss"};
    for (const auto& [name, value] : logs.metrics) names.push_back(name);
    if (logs.validation_loss) names.push_back("val_loss");
    for (const auto& [name, value] : logs.validation_metrics) names.push_back("val_" + name);
    return names;
}

double peak_rss_mib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return double(usage.ru_maxrss) / 1024.0; // kilobytes on Linux
}

// ---- ProgressBar ----

ProgressBar::ProgressBar(std::ostream& out, std::optional<bool> interactive)
    : out_(out), interactive_(interactive.value_or(isatty(STDOUT_FILENO) != 0)) {}

ProgressBar::ProgressBar() : ProgressBar(std::cout) {}

void ProgressBar::on_epoch_begin(FitContext& context, std::int64_t epoch) {
    out_ << "Epoch " << epoch + 1 << '/' << context.epochs << '\n' << std::flush;
    epoch_start_ = last_draw_ = Clock::now();
    steps_this_epoch_ = 0;
    loss_sum_ = examples_ = 0;
    metric_sums_.clear();
    skipped_ = 0;
}

std::string ProgressBar::line(const StepLogs& logs) const {
    constexpr int width = 20;
    const double done = double(logs.batch) / double(std::max<std::int64_t>(logs.batches_per_epoch, 1));
    const int full = static_cast<int>(done * width);
    std::string bar;
    for (int i = 0; i < width; ++i) bar += i < full ? "━" : (i == full ? "╺" : "─");

    const double elapsed = seconds_between(epoch_start_, Clock::now());
    const double per_step = elapsed / double(std::max<std::int64_t>(steps_this_epoch_, 1));
    const bool finished = logs.batch == logs.batches_per_epoch;
    std::ostringstream text;
    const std::string total = std::to_string(logs.batches_per_epoch);
    text << std::string(total.size() - std::min(total.size(), std::to_string(logs.batch).size()), ' ') << logs.batch
         << '/' << total << ' ' << bar << ' ';
    if (finished)
        text << duration_text(elapsed) << ' ';
    else
        text << "ETA " << duration_text(per_step * double(logs.batches_per_epoch - logs.batch)) << ' ';
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.0fms/step", per_step * 1e3);
    text << rate;
    Metrics means{{"loss", loss_sum_ / std::max(examples_, 1.0)}};
    for (std::size_t i = 0; i < metric_sums_.size() && i < logs.metrics.size(); ++i)
        means.emplace_back(logs.metrics[i].first, metric_sums_[i] / std::max(examples_, 1.0));
    text << figures(means, "");
    char scale[80];
    std::snprintf(scale, sizeof scale, " - loss_scale: %g - skipped: %lld", double(logs.loss_scale),
                  static_cast<long long>(skipped_));
    text << scale;
    return text.str();
}

void ProgressBar::on_step_end(FitContext&, const StepLogs& logs) {
    ++steps_this_epoch_;
    loss_sum_ += logs.loss * double(logs.batch_size);
    metric_sums_.resize(logs.metrics.size());
    for (std::size_t i = 0; i < logs.metrics.size(); ++i)
        metric_sums_[i] += logs.metrics[i].second * double(logs.batch_size);
    examples_ += double(logs.batch_size);
    skipped_ += logs.skipped;
    last_ = logs;
    const auto now = Clock::now();
    if (interactive_ && (seconds_between(last_draw_, now) >= 0.1 || logs.batch == logs.batches_per_epoch)) {
        out_ << '\r' << line(logs) << "\x1b[K" << std::flush;
        last_draw_ = now;
    }
}

void ProgressBar::on_epoch_end(FitContext&, const EpochLogs& logs) {
    out_ << (interactive_ ? "\r" : "") << line(last_);
    if (logs.validation_loss) {
        Metrics validation = logs.validation_metrics;
        validation.emplace_back("loss", *logs.validation_loss);
        out_ << figures(validation, "test_");
    }
    out_ << (interactive_ ? "\x1b[K\n" : "\n") << std::flush;
}

void ProgressBar::on_train_end(FitContext&, bool) {
    if (steps_this_epoch_ == 0 || last_.batch == last_.batches_per_epoch) return; // the epoch's line is done
    out_ << (interactive_ ? "\r" : "") << line(last_) << (interactive_ ? "\x1b[K\n" : "\n") << std::flush;
    steps_this_epoch_ = 0;
}

// ---- ModelCheckpoint ----

ModelCheckpoint::ModelCheckpoint(std::filesystem::path path, std::int64_t every_steps, SaveOptions options)
    : path_(std::move(path)), every_steps_(every_steps), options_(options) {
    if (every_steps < 0) throw std::invalid_argument("ModelCheckpoint: every_steps must not be negative");
}

void ModelCheckpoint::save(FitContext& context) {
    if (context.state.step == last_saved_step_) return;
    save_checkpoint(path_, context.model, context.optimizer, &context.state, options_);
    last_saved_step_ = context.state.step;
    ++saves_;
}

void ModelCheckpoint::on_step_end(FitContext& context, const StepLogs& logs) {
    if (due(every_steps_, logs)) save(context);
}

void ModelCheckpoint::on_epoch_end(FitContext& context, const EpochLogs&) { save(context); }

void ModelCheckpoint::on_train_end(FitContext& context, bool) { save(context); }

// ---- BackupAndRestore ----

BackupAndRestore::BackupAndRestore(std::filesystem::path path, std::int64_t every_steps)
    : path_(std::move(path)), every_steps_(every_steps) {
    if (every_steps < 0) throw std::invalid_argument("BackupAndRestore: every_steps must not be negative");
}

void BackupAndRestore::on_train_begin(FitContext& context) {
    restored_ = std::filesystem::exists(path_);
    if (restored_) load_checkpoint(path_, context.model, context.optimizer, &context.state);
}

void BackupAndRestore::on_step_end(FitContext& context, const StepLogs& logs) {
    if (due(every_steps_, logs)) save_checkpoint(path_, context.model, context.optimizer, &context.state);
}

void BackupAndRestore::on_epoch_end(FitContext& context, const EpochLogs&) {
    save_checkpoint(path_, context.model, context.optimizer, &context.state);
}

void BackupAndRestore::on_train_end(FitContext& context, bool completed) {
    if (completed)
        std::filesystem::remove(path_);
    else
        save_checkpoint(path_, context.model, context.optimizer, &context.state); // stopped early: resumable
}

// ---- JsonLinesLogger ----

JsonLinesLogger::JsonLinesLogger(const std::filesystem::path& path, bool append) : path_(path) {
    if (path.empty()) return; // the summary only
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!out_) throw std::runtime_error("cannot open the log file " + path.string() + " for writing");
}

void JsonLinesLogger::on_train_begin(FitContext&) { step_start_ = Clock::now(); }

namespace {

/// ,"rank_digests":["…","…"] (nothing for none).
std::string digests_json(const std::vector<std::uint64_t>& digests) {
    if (digests.empty()) return "";
    std::string text = ",\"rank_digests\":[";
    char hex[20];
    for (std::size_t i = 0; i < digests.size(); ++i) {
        std::snprintf(hex, sizeof hex, "%s\"%016llx\"", i ? "," : "", static_cast<unsigned long long>(digests[i]));
        text += hex;
    }
    return text + "]";
}

} // namespace

void JsonLinesLogger::on_step_end(FitContext&, const StepLogs& logs) {
    const Clock::duration step_time = Clock::now() - step_start_;
    training_time_ += step_time;
    examples_ += static_cast<std::int64_t>(logs.batch_size);
    if (out_.is_open())
        out_ << "{\"step\":" << logs.step << ",\"epoch\":" << logs.epoch + 1 << ",\"loss\":" << json_number(logs.loss)
             << ",\"loss_scale\":" << json_number(logs.loss_scale)
             << ",\"skipped\":" << (logs.skipped ? "true" : "false")
             << ",\"grad_norm\":" << json_number(logs.gradient_norm)
             << ",\"learning_rate\":" << json_number(logs.learning_rate)
             << ",\"seconds\":" << json_number(std::chrono::duration<double>(step_time).count())
             << (logs.telemetry ? ",\"telemetry\":" + telemetry_json(*logs.telemetry) : std::string())
             << digests_json(logs.rank_digests) << "}\n";
    if (!logs.rank_digests.empty()) summary_.rank_digests = logs.rank_digests;
    step_start_ = Clock::now(); // logging is not training time
}

void JsonLinesLogger::on_epoch_end(FitContext&, const EpochLogs& logs) {
    if (out_.is_open()) {
        out_ << "{\"event\":\"epoch\",\"epoch\":" << logs.epoch + 1
             << ",\"train_loss\":" << json_number(logs.train_loss)
             << ",\"test_accuracy\":" << json_number(logs.validation_accuracy.value_or(NAN));
        for (const auto& [name, value] : logs.metrics) out_ << ",\"train_" << name << "\":" << json_number(value);
        if (logs.validation_loss) out_ << ",\"test_loss\":" << json_number(*logs.validation_loss);
        for (const auto& [name, value] : logs.validation_metrics)
            if (name != "accuracy") out_ << ",\"test_" << name << "\":" << json_number(value);
        out_ << ",\"seconds\":" << json_number(logs.seconds)
             << ",\"samples_per_second\":" << json_number(logs.samples_per_second) << "}\n"
             << std::flush;
    }
    step_start_ = Clock::now(); // nor are evaluation and logging
}

void JsonLinesLogger::on_train_end(FitContext& context, bool) {
    summary_.steps = context.state.step;
    summary_.test_accuracy = context.validation_accuracy;
    summary_.skipped_steps = context.optimizer.skipped_steps();
    summary_.loss_scale = context.optimizer.current_loss_scale();
    const double seconds = std::chrono::duration<double>(training_time_).count();
    summary_.samples_per_second = seconds > 0 ? double(examples_) / seconds : 0;
    summary_.peak_rss_mib = peak_rss_mib();
    summary_.weights_digest = weights_digest(context.model.variables());
    summary_.isa = autodiff::name_of(autodiff::isa());
    if (!out_.is_open()) return;
    out_ << "{\"event\":\"end\",\"steps\":" << summary_.steps << ",\"skipped_steps\":" << summary_.skipped_steps
         << ",\"loss_scale\":" << json_number(summary_.loss_scale)
         << ",\"test_accuracy\":" << json_number(summary_.test_accuracy.value_or(NAN))
         << ",\"samples_per_second\":" << json_number(summary_.samples_per_second)
         << ",\"peak_rss_mib\":" << json_number(summary_.peak_rss_mib) << ",\"weights_digest\":\""
         << summary_.weights_digest << "\",\"isa\":\"" << summary_.isa << '"' << digests_json(summary_.rank_digests)
         << "}\n"
         << std::flush;
    if (!out_) throw std::runtime_error("writing the log file " + path_.string() + " failed");
}

// ---- TerminateOnNaN ----

TerminateOnNaN::TerminateOnNaN(std::ostream& out) : out_(out) {}
TerminateOnNaN::TerminateOnNaN() : TerminateOnNaN(std::cerr) {}

void TerminateOnNaN::on_step_end(FitContext& context, const StepLogs& logs) {
    if (std::isfinite(logs.loss)) return;
    out_ << "\nstep " << logs.step << ": the loss is " << logs.loss << "; training stops (TerminateOnNaN)\n";
    terminated_ = true;
    context.stop_requested = true;
}

// ---- LossScaleMonitor ----

LossScaleMonitor::LossScaleMonitor(std::ostream& out, std::int64_t window, double warn_fraction)
    : out_(out), window_(window), warn_fraction_(warn_fraction) {
    if (window < 1) throw std::invalid_argument("LossScaleMonitor: window must be at least 1");
}

void LossScaleMonitor::on_step_end(FitContext& context, const StepLogs& logs) {
    const float scale = context.optimizer.current_loss_scale(); // 1 throughout for an optimizer that does not scale
    if (scale != logs.loss_scale) {
        ++changes_;
        out_ << "\nstep " << logs.step << ": loss scale " << logs.loss_scale << " -> " << scale
             << (logs.skipped ? " (overflow: step skipped)" : " (grown)") << '\n';
    }
    window_skips_ += logs.skipped;
    if (++window_steps_ < window_) return;
    if (double(window_skips_) > warn_fraction_ * double(window_steps_)) {
        out_ << "\nwarning: " << window_skips_ << " of the last " << window_steps_
             << " steps were skipped for inf/NaN gradients (loss scale now " << scale << ")\n";
    }
    window_skips_ = window_steps_ = 0;
}

} // namespace mixprec::models
