#pragma once
/// Learning-rate schedules: a function of the number of applied optimizer steps (0-based), as in Keras.
/// Skipped steps (a LossScaleOptimizer that found inf/NaN) do not advance the step, so they do not
/// advance the schedule either. Schedules compute in double and return float.

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

namespace mixprec::optim {

/// lr = f(step), step = number of steps applied so far (0 for the first step).
class Schedule {
  public:
    virtual ~Schedule() = default;
    virtual float operator()(std::int64_t step) const = 0;
    /// "exponential_decay", "cosine_decay": for messages and configs.
    virtual std::string name() const { return "schedule"; }
};

/// lr = initial · rate^(step / decay_steps);  the exponent is floored when `staircase` (Keras).
class ExponentialDecay final : public Schedule {
  public:
    struct Options {
        float initial = 0.01f;
        std::int64_t decay_steps = 1; ///< > 0
        float decay_rate = 0.96f;     ///< > 0
        bool staircase = false;
    };
    /// Throws std::invalid_argument naming a bad option (initial < 0 or not finite, decay_steps <= 0,
    /// decay_rate <= 0 or not finite).
    explicit ExponentialDecay(Options options);
    float operator()(std::int64_t step) const override;
    std::string name() const override { return "exponential_decay"; }
    const Options& options() const { return options_; }

  private:
    Options options_;
};

/// Keras 3 CosineDecay. Without warmup: lr = initial · ((1-alpha) · ½(1 + cos(π·min(step, D)/D)) + alpha).
/// With warmup (W = warmup_steps > 0, T = warmup_target): lr = initial + (T - initial)·step/W while
/// step < W, then the cosine above from T instead of initial over step - W, then constant alpha·T.
/// warmup_target must be set exactly when warmup_steps > 0 (Keras ignores warmup_steps without a
/// target and would decay from the target with warmup_steps == 0; we reject both as ambiguous).
class CosineDecay final : public Schedule {
  public:
    struct Options {
        float initial = 0.01f;
        std::int64_t decay_steps = 1; ///< D > 0
        float alpha = 0;              ///< final fraction of the peak lr, in [0, 1]
        std::int64_t warmup_steps = 0;
        std::optional<float> warmup_target{};
    };
    /// Throws std::invalid_argument naming a bad option.
    explicit CosineDecay(Options options);
    float operator()(std::int64_t step) const override;
    std::string name() const override { return "cosine_decay"; }
    const Options& options() const { return options_; }

  private:
    Options options_;
};

/// A constant learning rate or a schedule; implicitly built from either, so options read
/// `.learning_rate = 1e-3` or `.learning_rate = std::make_shared<CosineDecay>(...)`.
class LearningRate {
  public:
    /// A constant; throws std::invalid_argument unless finite and >= 0.
    template <class T>
    requires std::is_arithmetic_v<T> LearningRate(T value) : LearningRate(static_cast<float>(value), 0) {}
    /// A schedule; throws std::invalid_argument if null.
    LearningRate(std::shared_ptr<const Schedule> schedule);
    template <std::derived_from<Schedule> S>
    LearningRate(std::shared_ptr<S> schedule) : LearningRate(std::shared_ptr<const Schedule>(std::move(schedule))) {}

    /// The rate for the step that follows `step` applied steps.
    float at(std::int64_t step) const { return schedule_ ? (*schedule_)(step) : value_; }
    /// Null for a constant.
    const std::shared_ptr<const Schedule>& schedule() const { return schedule_; }

  private:
    LearningRate(float value, int);
    float value_ = 0;
    std::shared_ptr<const Schedule> schedule_;
};

} // namespace mixprec::optim
