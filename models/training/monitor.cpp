#include <mixprec/models/training/monitor.hpp>

#include <mixprec/models/training/learning_rate_scheduler.hpp>
#include <mixprec/models/training/model.hpp>
#include <mixprec/optim/optimizer.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace mixprec::models {

namespace {

std::string number(double value) {
    std::ostringstream text;
    text << value;
    return text.str();
}

void require(bool ok, const std::string& owner, const std::string& what, double value) {
    if (!ok) throw std::invalid_argument(owner + ": " + what + ", not " + number(value));
}

} // namespace

// ---- Monitor ----

Monitor::Monitor(std::string owner, std::string monitor, std::string_view mode, double min_delta,
                 std::ostream& warnings)
    : owner_(std::move(owner)), monitor_(std::move(monitor)), min_delta_(min_delta), warnings_(warnings) {
    if (monitor_.empty()) throw std::invalid_argument(owner_ + ": monitor must name a figure (\"val_loss\", ...)");
    if (mode == "max" || (mode == "auto" && monitor_.find("acc") != std::string::npos))
        maximize_ = true;
    else if (mode != "min" && mode != "auto")
        throw std::invalid_argument(owner_ + ": mode must be \"auto\", \"min\" or \"max\", not \"" + std::string(mode) +
                                    "\"");
    require(std::isfinite(min_delta) && min_delta >= 0, owner_, "min_delta must be finite and >= 0", min_delta);
}

void Monitor::reset() {
    best_.reset();
    wait_ = 0;
    warned_ = false;
}

std::optional<double> Monitor::read(const EpochLogs& logs) {
    const std::optional<double> value = logs.get(monitor_);
    if (!value && !warned_) {
        warnings_ << "warning: " << owner_ << " monitors \"" << monitor_ << "\", which the logs of epoch " << logs.epoch
                  << " do not have (they have:";
        for (const std::string& name : figure_names(logs)) warnings_ << ' ' << name;
        warnings_ << "); it does nothing until that figure appears (said once per run)\n";
        warned_ = true;
    }
    return value;
}

bool Monitor::improves(double value, std::optional<double> reference) const {
    if (std::isnan(value)) return false;
    if (!reference) return true;
    return maximize_ ? value - min_delta_ > *reference : value + min_delta_ < *reference;
}

bool Monitor::record(double value) {
    if (!improves(value, best_)) return false;
    best_ = value;
    return true;
}

// ---- EarlyStopping ----

EarlyStopping::EarlyStopping(Options options) : EarlyStopping(std::move(options), std::cerr) {}

EarlyStopping::EarlyStopping(Options options, std::ostream& warnings)
    : options_(std::move(options)),
      monitor_("EarlyStopping", options_.monitor, options_.mode, options_.min_delta, warnings) {
    const std::string owner = "EarlyStopping";
    require(options_.patience >= 0, owner, "patience must be >= 0", double(options_.patience));
    require(options_.start_from_epoch >= 0, owner, "start_from_epoch must be >= 0", double(options_.start_from_epoch));
    if (options_.baseline)
        require(std::isfinite(*options_.baseline), owner, "baseline must be finite", *options_.baseline);
}

void EarlyStopping::on_train_begin(FitContext&) {
    monitor_.reset();
    stopped_epoch_.reset();
    best_epoch_.reset();
    best_weights_.clear();
}

void EarlyStopping::keep_weights(const FitContext& context) {
    best_weights_.clear();
    for (const autodiff::Variable& v : context.model.variables()) best_weights_.push_back(v.value().clone());
}

void EarlyStopping::on_epoch_end(FitContext& context, const EpochLogs& logs) {
    const std::optional<double> value = monitor_.read(logs);
    if (!value || logs.epoch < options_.start_from_epoch) return;
    monitor_.count();
    if (monitor_.record(*value)) {
        best_epoch_ = logs.epoch;
        if (options_.restore_best_weights) keep_weights(context);
        if (!options_.baseline || monitor_.improves(*value, options_.baseline)) monitor_.reset_wait();
        return;
    }
    if (options_.restore_best_weights && best_weights_.empty()) { // the first monitored epoch had a NaN
        keep_weights(context);
        best_epoch_ = logs.epoch;
    }
    if (monitor_.wait() >= options_.patience) {
        stopped_epoch_ = logs.epoch;
        context.stop_requested = true;
    }
}

void EarlyStopping::on_train_end(FitContext& context, bool) {
    if (best_weights_.empty()) return;
    std::vector<autodiff::Variable> variables = context.model.variables();
    if (variables.size() != best_weights_.size())
        throw std::logic_error("EarlyStopping: the model has " + std::to_string(variables.size()) +
                               " variables now but had " + std::to_string(best_weights_.size()) + " at its best epoch");
    for (std::size_t i = 0; i < variables.size(); ++i) variables[i].assign(best_weights_[i]);
}

// ---- ReduceLROnPlateau ----

ReduceLROnPlateau::ReduceLROnPlateau(Options options) : ReduceLROnPlateau(std::move(options), std::cerr) {}

ReduceLROnPlateau::ReduceLROnPlateau(Options options, std::ostream& warnings)
    : options_(std::move(options)),
      monitor_("ReduceLROnPlateau", options_.monitor, options_.mode, options_.min_delta, warnings) {
    const std::string owner = "ReduceLROnPlateau";
    require(options_.factor > 0 && options_.factor < 1, owner, "factor must be in (0, 1)", options_.factor);
    require(options_.patience >= 0, owner, "patience must be >= 0", double(options_.patience));
    require(options_.cooldown >= 0, owner, "cooldown must be >= 0", double(options_.cooldown));
    require(std::isfinite(options_.min_lr) && options_.min_lr >= 0, owner, "min_lr must be finite and >= 0",
            options_.min_lr);
}

void ReduceLROnPlateau::on_train_begin(FitContext& context) {
    require_constant_learning_rate(context.optimizer, "ReduceLROnPlateau");
    monitor_.reset();
    cooldown_left_ = 0;
    reductions_ = 0;
}

void ReduceLROnPlateau::on_epoch_end(FitContext& context, const EpochLogs& logs) {
    const std::optional<double> value = monitor_.read(logs);
    if (!value) return;
    if (cooldown_left_ > 0) {
        --cooldown_left_;
        monitor_.reset_wait();
    }
    if (monitor_.record(*value)) {
        monitor_.reset_wait();
        return;
    }
    if (cooldown_left_ > 0) return;
    monitor_.count();
    if (monitor_.wait() < options_.patience) return;
    require_constant_learning_rate(context.optimizer, "ReduceLROnPlateau");
    const float rate = context.optimizer.current_learning_rate();
    if (!(rate > static_cast<float>(options_.min_lr))) return; // at the floor already
    context.optimizer.set_learning_rate(static_cast<float>(std::max(double(rate) * options_.factor, options_.min_lr)));
    cooldown_left_ = options_.cooldown;
    monitor_.reset_wait();
    ++reductions_;
}

} // namespace mixprec::models
