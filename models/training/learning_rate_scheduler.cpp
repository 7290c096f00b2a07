#include <mixprec/models/training/learning_rate_scheduler.hpp>

#include <mixprec/optim/optimizer.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mixprec::models {

void require_constant_learning_rate(const optim::Optimizer& optimizer, std::string_view callback) {
    const auto& schedule = optimizer.learning_rate().schedule();
    if (!schedule) return;
    throw std::invalid_argument(std::string(callback) + ": the optimizer's learning rate is a schedule (" +
                                schedule->name() + "); a learning-rate schedule and " + std::string(callback) +
                                " cannot be combined: give the optimizer a constant learning rate");
}

LearningRateScheduler::LearningRateScheduler(Schedule schedule) : schedule_(std::move(schedule)) {
    if (!schedule_) throw std::invalid_argument("LearningRateScheduler: schedule must be a function, not empty");
}

void LearningRateScheduler::on_train_begin(FitContext& context) {
    require_constant_learning_rate(context.optimizer, "LearningRateScheduler");
}

void LearningRateScheduler::on_epoch_begin(FitContext& context, std::int64_t epoch) {
    require_constant_learning_rate(context.optimizer, "LearningRateScheduler");
    const double rate = schedule_(epoch, double(context.optimizer.current_learning_rate()));
    if (!(rate >= 0 && rate <= double(std::numeric_limits<float>::max()))) {
        std::ostringstream message;
        message << "LearningRateScheduler: the schedule gave " << rate << " for epoch " << epoch
                << "; a learning rate must be finite, >= 0 and within float32's range";
        throw std::invalid_argument(message.str());
    }
    context.optimizer.set_learning_rate(static_cast<float>(rate));
}

} // namespace mixprec::models
