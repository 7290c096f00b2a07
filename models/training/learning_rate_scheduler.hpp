#pragma once
/// LearningRateScheduler: sets the optimizer's learning rate at the start of every epoch from a function
/// of the epoch, as Keras's.
///
///   models::LearningRateScheduler warm_then_decay([](std::int64_t epoch, double lr) {
///       return epoch < 10 ? lr : lr * std::exp(-0.1);
///   });
///
/// The callback keeps no state of its own; the rate it sets is not part of checkpoints (nor is any
/// callback's state, as in Keras): a run resumed in a new process starts from the rate its optimizer was
/// built with, so a schedule that reads `lr` (rather than computing from `epoch` alone) starts over there.

#include <mixprec/models/training/callback.hpp>

#include <cstdint>
#include <functional>
#include <string_view>

namespace mixprec::models {

/// std::invalid_argument unless `optimizer`'s learning rate is a constant (learning_rate().schedule() is
/// null): `callback`, which sets the rate, and a schedule cannot be combined (setting a constant would
/// silently replace the schedule).
void require_constant_learning_rate(const optim::Optimizer& optimizer, std::string_view callback);

/// At on_epoch_begin(epoch): rate = schedule(epoch, lr), where epoch counts from 0 and lr is the optimizer's
/// current_learning_rate() (a float32, widened); the result is set as a constant rate, rounded to float32.
/// A result that is NaN, infinite, negative or beyond float32's range is refused with std::invalid_argument
/// naming the epoch and the value (the rate is left as it was). An optimizer whose learning rate is a
/// schedule is refused at on_train_begin and on_epoch_begin (require_constant_learning_rate). A resumed
/// epoch (fit restarting inside it) calls the schedule again for that epoch.
class LearningRateScheduler final : public Callback {
  public:
    using Schedule = std::function<double(std::int64_t epoch, double lr)>;
    /// std::invalid_argument for an empty function.
    explicit LearningRateScheduler(Schedule schedule);

    void on_train_begin(FitContext& context) override;
    void on_epoch_begin(FitContext& context, std::int64_t epoch) override;

  private:
    Schedule schedule_;
};

} // namespace mixprec::models
