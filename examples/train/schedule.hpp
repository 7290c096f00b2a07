#pragma once
// The trainer's learning rate: --lr-schedule, --warmup-steps and --decay-rate made into an optim::LearningRate
// over the run's optimizer steps. Header-only: the trainer is three sources and this is one small idea.
//
// The schedule is a function of the optimizer's applied-step count (optim/schedule.hpp), and everything it
// is built from comes from the flags and the training set's size, never from how far the run has got: a run
// continued with --resume (and the same flags) follows the schedule of the run it continues.

#include "options.hpp"

#include <mixprec/mixprec.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace mixprec::train {

/// How long a run is, in optimizer steps (what the schedules count).
struct RunLength {
    std::int64_t steps_per_epoch = 0; ///< ceil(ceil(examples / --batch-size) / --accumulate-steps)
    std::int64_t total = 0;           ///< --epochs × steps_per_epoch, capped by --max-steps
};

/// A step of fit is one optimizer update, made of --accumulate-steps batches (models/training/fit.hpp); an
/// epoch whose batches do not divide evenly ends with one update of the batches that are left.
inline RunLength run_length(const Options& o, std::size_t examples) {
    const auto batches = static_cast<std::int64_t>((examples + o.batch_size - 1) / o.batch_size);
    RunLength length;
    length.steps_per_epoch = (batches + o.accumulate_steps - 1) / o.accumulate_steps;
    length.total = o.epochs * length.steps_per_epoch;
    if (o.max_steps > 0 && o.max_steps < length.total) length.total = o.max_steps;
    return length;
}

/// lr = peak · step / W for step < W (from 0, as optim::CosineDecay's warmup), then inner(step − W): a linear
/// warmup in front of a constant or a decay, which starts decaying once the warmup is over.
class Warmup final : public optim::Schedule {
  public:
    Warmup(float peak, std::int64_t warmup_steps, optim::LearningRate inner)
        : peak_(peak), warmup_steps_(warmup_steps), inner_(std::move(inner)) {}
    float operator()(std::int64_t step) const override {
        if (step < warmup_steps_)
            return float(double(peak_) * double(std::max<std::int64_t>(step, 0)) / double(warmup_steps_));
        return inner_.at(step - warmup_steps_);
    }
    std::string name() const override { return "warmup"; }

  private:
    float peak_;
    std::int64_t warmup_steps_; // > 0
    optim::LearningRate inner_;
};

/// Why the flags' schedule cannot run over `length`, naming the flags; nothing when it can. Cosine decays
/// over the steps after the warmup and needs at least one (optim::CosineDecay refuses decay_steps ≤ 0); a
/// warmup as long as the run is fine for the others, which then never reach --learning-rate. Nothing to say
/// when nothing trains.
inline std::optional<std::string> schedule_problem(const Options& o, const RunLength& length) {
    if (o.lr_schedule != "cosine" || length.total == 0 || o.warmup_steps < length.total) return std::nullopt;
    const bool capped = o.max_steps > 0 && o.max_steps == length.total;
    const std::string why =
        capped ? "--max-steps"
               : "--epochs " + std::to_string(o.epochs) + " × " + std::to_string(length.steps_per_epoch) + " per epoch";
    return "--warmup-steps: " + std::to_string(o.warmup_steps) + " warmup steps leave no step for --lr-schedule " +
           "cosine to decay over: the run has " + std::to_string(length.total) + " optimizer steps (" + why +
           "); use fewer warmup steps or a longer run";
}

/// The learning rate the flags describe (a constant --learning-rate when nothing trains: --epochs 0, or an
/// empty dataset, which fit then refuses).
inline optim::LearningRate learning_rate(const Options& o, const RunLength& length) {
    const float lr = *o.learning_rate;
    const std::int64_t warmup = o.warmup_steps;
    if (length.total == 0) return lr;
    if (o.lr_schedule == "cosine") {
        optim::CosineDecay::Options cosine{.initial = warmup > 0 ? 0.0f : lr, .decay_steps = length.total - warmup};
        if (warmup > 0) {
            cosine.warmup_steps = warmup;
            cosine.warmup_target = lr;
        }
        return std::make_shared<optim::CosineDecay>(cosine);
    }
    optim::LearningRate after = lr;
    if (o.lr_schedule == "exponential")
        after = std::make_shared<optim::ExponentialDecay>(optim::ExponentialDecay::Options{
            .initial = lr, .decay_steps = length.steps_per_epoch, .decay_rate = *o.decay_rate});
    if (warmup == 0) return after;
    return std::make_shared<Warmup>(lr, warmup, std::move(after));
}

/// ", cosine decay over 2245 steps after 100 warmup steps" for the trainer's header line; empty for a
/// constant rate without warmup.
inline std::string describe_schedule(const Options& o, const RunLength& length) {
    std::string text;
    char number[32];
    if (o.lr_schedule == "cosine") {
        text = ", cosine decay to 0 over " + std::to_string(length.total - o.warmup_steps) + " steps";
    } else if (o.lr_schedule == "exponential") {
        std::snprintf(number, sizeof number, "%g", double(*o.decay_rate));
        text = ", exponential decay ×" + std::string(number) + " per epoch of " +
               std::to_string(length.steps_per_epoch) + " steps";
    }
    if (o.warmup_steps > 0)
        text += (text.empty() ? ", " : " after ") + std::to_string(o.warmup_steps) + " warmup steps";
    return text;
}

} // namespace mixprec::train
