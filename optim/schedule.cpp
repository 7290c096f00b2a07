#include <mixprec/optim/schedule.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <stdexcept>

namespace mixprec::optim {

namespace {
[[noreturn]] void invalid(const std::string& where, const std::string& what, double value) {
    std::ostringstream message;
    message << where << ": " << what << " (got " << value << ")";
    throw std::invalid_argument(message.str());
}
} // namespace

ExponentialDecay::ExponentialDecay(Options o) : options_(o) {
    if (!(std::isfinite(o.initial) && o.initial >= 0))
        invalid("ExponentialDecay", "initial must be finite and >= 0", o.initial);
    if (o.decay_steps <= 0) invalid("ExponentialDecay", "decay_steps must be > 0", double(o.decay_steps));
    if (!(std::isfinite(o.decay_rate) && o.decay_rate > 0))
        invalid("ExponentialDecay", "decay_rate must be finite and > 0", o.decay_rate);
}

float ExponentialDecay::operator()(std::int64_t step) const {
    double p = double(step) / double(options_.decay_steps);
    if (options_.staircase) p = std::floor(p);
    return float(double(options_.initial) * std::pow(double(options_.decay_rate), p));
}

CosineDecay::CosineDecay(Options o) : options_(o) {
    if (!(std::isfinite(o.initial) && o.initial >= 0))
        invalid("CosineDecay", "initial must be finite and >= 0", o.initial);
    if (o.decay_steps <= 0) invalid("CosineDecay", "decay_steps must be > 0", double(o.decay_steps));
    if (!(o.alpha >= 0 && o.alpha <= 1)) invalid("CosineDecay", "alpha must be in [0, 1]", o.alpha);
    if (o.warmup_steps < 0) invalid("CosineDecay", "warmup_steps must be >= 0", double(o.warmup_steps));
    if (o.warmup_steps > 0 && !o.warmup_target)
        invalid("CosineDecay", "warmup_steps > 0 needs a warmup_target", double(o.warmup_steps));
    if (o.warmup_steps == 0 && o.warmup_target)
        invalid("CosineDecay", "warmup_target needs warmup_steps > 0", *o.warmup_target);
    if (o.warmup_target && !(std::isfinite(*o.warmup_target) && *o.warmup_target >= 0))
        invalid("CosineDecay", "warmup_target must be finite and >= 0", *o.warmup_target);
}

float CosineDecay::operator()(std::int64_t step) const {
    const double decay = double(options_.decay_steps), warmup = double(options_.warmup_steps);
    double s = std::min(double(std::max<std::int64_t>(step, 0)), decay + warmup);
    double peak = options_.initial;
    if (options_.warmup_target) {
        const double target = *options_.warmup_target;
        if (s < warmup) return float(peak + (target - peak) * (s / warmup));
        peak = target;
        s -= warmup;
    }
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * s / decay));
    return float(peak * ((1.0 - options_.alpha) * cosine + options_.alpha));
}

LearningRate::LearningRate(float value, int) : value_(value) {
    if (!(std::isfinite(value) && value >= 0)) invalid("LearningRate", "learning_rate must be finite and >= 0", value);
}

LearningRate::LearningRate(std::shared_ptr<const Schedule> schedule) : schedule_(std::move(schedule)) {
    if (!schedule_) throw std::invalid_argument("LearningRate: the schedule is null");
}

} // namespace mixprec::optim
