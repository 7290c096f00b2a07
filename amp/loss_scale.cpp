#include <mixprec/amp/loss_scale.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace mixprec::amp {
namespace {

constexpr std::array<std::string_view, 8> rule_names{"mixprec",  "keras",    "tf_keras", "pytorch",
                                                     "deepspeed", "megatron", "cerebras", "ascend"};

std::string text(double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
}

[[noreturn]] void bad(const std::string& option, const std::string& why) {
    throw std::invalid_argument("LossScaleOptions." + option + " " + why);
}

constexpr float smallest_scale = 0x1p-126f; // the guard every rule shares: the scale stays positive

} // namespace

std::string_view name_of(ScaleRule rule) { return rule_names.at(static_cast<std::size_t>(rule)); }

std::vector<std::string_view> loss_scale_preset_names() { return {rule_names.begin(), rule_names.end()}; }

LossScaleOptions loss_scale_preset(std::string_view name) {
    LossScaleOptions o;
    const float inf = INFINITY;
    if (name == "mixprec") return o;
    if (name == "keras") return {.rule = ScaleRule::keras, .min_scale = 0.0f, .max_scale = inf};
    if (name == "tf_keras") return {.rule = ScaleRule::tf_keras, .max_scale = inf};
    if (name == "pytorch")
        return {.rule = ScaleRule::pytorch, .initial_scale = 65536.0f, .min_scale = 0.0f, .max_scale = inf};
    if (name == "deepspeed")
        return {.rule = ScaleRule::deepspeed, .initial_scale = 65536.0f, .growth_interval = 1000, .hysteresis = 2,
                .max_scale = inf, .at_min_scale = AtMinScale::raise};
    if (name == "megatron")
        return {.rule = ScaleRule::megatron, .initial_scale = 4294967296.0f, .growth_interval = 1000,
                .hysteresis = 2, .max_scale = inf};
    if (name == "cerebras")
        return {.rule = ScaleRule::cerebras, .min_scale = 0x1p-14f, .max_scale = 32768.0f};
    if (name == "ascend")
        return {.rule = ScaleRule::ascend, .initial_scale = 65536.0f, .growth_interval = 1000,
                .backoff_factor = 0.8f, .max_scale = inf, .decrease_every = 2};
    std::string names;
    for (auto n : rule_names) names += (names.empty() ? "" : ", ") + std::string(n);
    throw std::invalid_argument("unknown loss scale preset '" + std::string(name) + "' (valid: " + names + ")");
}

LossScale::LossScale(LossScaleOptions o) : options_(o) {
    const auto finite_positive = [](float v) { return std::isfinite(v) && v > 0; };
    if (!finite_positive(o.initial_scale)) bad("initial_scale", "must be finite and > 0, got " + text(o.initial_scale));
    if (o.growth_interval < 1) bad("growth_interval", "must be ≥ 1, got " + std::to_string(o.growth_interval));
    if (!(o.growth_factor > 1) || !std::isfinite(o.growth_factor))
        bad("growth_factor", "must be finite and > 1, got " + text(o.growth_factor));
    if (!(o.backoff_factor > 0 && o.backoff_factor < 1)) bad("backoff_factor", "must be in (0, 1), got " + text(o.backoff_factor));
    if (o.hysteresis < 1) bad("hysteresis", "must be ≥ 1, got " + std::to_string(o.hysteresis));
    if (!(o.min_scale >= 0) || std::isinf(o.min_scale)) bad("min_scale", "must be finite and ≥ 0, got " + text(o.min_scale));
    if (!(o.max_scale >= o.min_scale)) bad("max_scale", "must be ≥ min_scale (" + text(o.min_scale) + "), got " + text(o.max_scale));
    if (o.dynamic && (o.initial_scale < o.min_scale || o.initial_scale > o.max_scale))
        bad("initial_scale", "must lie in [min_scale, max_scale] = [" + text(o.min_scale) + ", " + text(o.max_scale) +
                                 "], got " + text(o.initial_scale));
    if (!(o.overflow_tolerance >= 0 && o.overflow_tolerance < 1))
        bad("overflow_tolerance", "must be in [0, 1), got " + text(o.overflow_tolerance));
    if (o.decrease_every < 1) bad("decrease_every", "must be ≥ 1, got " + std::to_string(o.decrease_every));
    state_.scale = state_.unclamped_scale = o.initial_scale;
    state_.hysteresis_left = o.hysteresis;
}

void LossScale::set_state(const LossScaleState& s) {
    if (!(std::isfinite(s.scale) && s.scale > 0)) bad("state.scale", "must be finite and > 0, got " + text(s.scale));
    state_ = s;
}

void LossScale::grow() {
    const float grown = state_.scale * options_.growth_factor;
    if (std::isfinite(grown) && grown <= options_.max_scale) {
        state_.scale = grown;
        ++state_.growths;
    }
}

void LossScale::back_off(float floor) {
    if (state_.scale <= floor && options_.at_min_scale == AtMinScale::raise)
        throw loss_scale_error("the loss scale is already at its minimum (" + text(floor) +
                               ") and the gradients still overflow: they are not finite even unscaled. Lower the "
                               "learning rate, clip the gradients, look for NaN or inf in the inputs, or train in "
                               "bfloat16, whose range is float32's");
    state_.scale = std::max({state_.scale * options_.backoff_factor, floor, smallest_scale});
    ++state_.backoffs;
}

void LossScale::update(bool finite) {
    if (!options_.dynamic) return;
    const LossScaleState before = state_; // a raise at min_scale leaves the state as it was
    try {
        step(finite);
    } catch (...) {
        state_ = before;
        throw;
    }
}

void LossScale::step(bool finite) {
    LossScaleState& s = state_;
    const LossScaleOptions& o = options_;
    const std::int64_t n = o.growth_interval;
    switch (o.rule) {
    case ScaleRule::mixprec:
        if (finite) {
            s.hysteresis_left = o.hysteresis;
            if (++s.growth_counter == n) {
                grow();
                s.growth_counter = 0;
            }
        } else {
            s.growth_counter = 0;
            if (--s.hysteresis_left <= 0) {
                s.hysteresis_left = 0;
                back_off(o.min_scale);
            }
        }
        break;
    case ScaleRule::keras:    // Keras 3, tf.keras and PyTorch share one rule: grow on the N-th finite step
    case ScaleRule::tf_keras: // in a row, reset and back off on an overflow. They differ in the floor
    case ScaleRule::pytorch:  // only (tf.keras never goes below 1) and in their presets' defaults.
        if (finite) {
            if (++s.growth_counter == n) {
                grow();
                s.growth_counter = 0;
            }
        } else {
            s.growth_counter = 0;
            back_off(o.rule == ScaleRule::tf_keras ? std::max(o.min_scale, 1.0f) : o.min_scale);
        }
        break;
    case ScaleRule::deepspeed:
        if (!finite) {
            if (o.hysteresis == 1 || s.hysteresis_left == 1) back_off(o.min_scale);
            else --s.hysteresis_left;
            s.last_overflow = s.iteration;
        } else {
            if (o.consecutive_hysteresis) s.hysteresis_left = o.hysteresis;
            const std::int64_t stable = s.iteration - s.last_overflow - 1;
            if (stable > 0 && stable % n == 0) {
                if (!o.consecutive_hysteresis) s.hysteresis_left = o.hysteresis;
                grow();
            }
        }
        ++s.iteration;
        break;
    case ScaleRule::megatron:
        if (!finite) {
            s.growth_counter = 0;
            if (--s.hysteresis_left <= 0) back_off(o.min_scale);
        } else if (++s.growth_counter == n) {
            s.growth_counter = 0;
            s.hysteresis_left = o.hysteresis;
            grow();
        }
        break;
    case ScaleRule::cerebras: {
        ++s.growth_counter;
        s.overflows_counted += finite ? 0 : 1;
        float u = s.scale;
        if (double(s.overflows_counted) / double(s.growth_counter) > o.overflow_tolerance) {
            u /= 2.0f;
            ++s.backoffs;
            s.growth_counter = s.overflows_counted = 0;
        }
            if (s.growth_counter > n) {
            if (std::isfinite(u * 2.0f)) u *= 2.0f;
            ++s.growths;
            s.growth_counter = s.overflows_counted = 0;
        }
        s.unclamped_scale = u;
        s.scale = std::clamp(u, o.min_scale, o.max_scale);
        break;
    }
    case ScaleRule::ascend:
        if (finite) {
            if (s.growth_counter + 1 >= n) {
                if (s.scale < 3.4e38f / o.growth_factor) {
                    s.scale *= o.growth_factor;
                    ++s.growths;
                }
                s.growth_counter = s.overflows_counted = 0;
            } else {
                ++s.growth_counter;
            }
        } else if (s.overflows_counted + 1 >= o.decrease_every) {
            s.scale = std::max(1.0f, s.scale * o.backoff_factor);
            ++s.backoffs;
            s.growth_counter = s.overflows_counted = 0;
        } else {
            ++s.overflows_counted;
            s.growth_counter = 0;
        }
        break;
    }
}

} // namespace mixprec::amp
