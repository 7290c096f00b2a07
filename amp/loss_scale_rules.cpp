// The loss-scale rules, one function each, and their table (amp/detail/loss_scale_rules.hpp). A new rule:
// a ScaleRule before `count` (loss_scale.hpp), its function here, its row in the table below; the
// static_asserts check that the table follows the enum.

#include <mixprec/amp/detail/loss_scale_rules.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace mixprec::amp::detail {
namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float smallest_scale = 0x1p-126f; // the guard every rule shares: the scale stays positive

/// mixprec: grow on the N-th finite step in a row; back off after `hysteresis` overflows in a row.
void mixprec_step(RuleStep& r, bool finite) {
    if (finite) {
        r.s.hysteresis_left = r.o.hysteresis;
        if (++r.s.growth_counter == r.o.growth_interval) {
            r.grow();
            r.s.growth_counter = 0;
        }
    } else {
        r.s.growth_counter = 0;
        if (--r.s.hysteresis_left <= 0) {
            r.s.hysteresis_left = 0;
            r.back_off(r.o.min_scale);
        }
    }
}

/// Keras 3, tf.keras and PyTorch share one rule: grow on the N-th finite step in a row, reset and back off
/// on an overflow. They differ only in the floor (tf.keras never goes below 1) and in their presets.
void keras_family_step(RuleStep& r, bool finite, float floor) {
    if (finite) {
        if (++r.s.growth_counter == r.o.growth_interval) {
            r.grow();
            r.s.growth_counter = 0;
        }
    } else {
        r.s.growth_counter = 0;
        r.back_off(floor);
    }
}
void keras_step(RuleStep& r, bool finite) { keras_family_step(r, finite, r.o.min_scale); } // PyTorch's as well
void tf_keras_step(RuleStep& r, bool finite) { keras_family_step(r, finite, std::max(r.o.min_scale, 1.0f)); }

/// DeepSpeed: grows when the clean steps since the last overflow are a positive multiple of N; backs off
/// once hysteresis runs out (refilled on growth, or on every clean step with consecutive_hysteresis).
void deepspeed_step(RuleStep& r, bool finite) {
    LossScaleState& s = r.s;
    if (!finite) {
        if (r.o.hysteresis == 1 || s.hysteresis_left == 1)
            r.back_off(r.o.min_scale);
        else
            --s.hysteresis_left;
        s.last_overflow = s.iteration;
    } else {
        if (r.o.consecutive_hysteresis) s.hysteresis_left = r.o.hysteresis;
        const std::int64_t stable = s.iteration - s.last_overflow - 1;
        if (stable > 0 && stable % r.o.growth_interval == 0) {
            if (!r.o.consecutive_hysteresis) s.hysteresis_left = r.o.hysteresis;
            r.grow();
        }
    }
    ++s.iteration;
}

/// Megatron: grow on the N-th finite step in a row (refilling hysteresis); back off once hysteresis runs out.
void megatron_step(RuleStep& r, bool finite) {
    LossScaleState& s = r.s;
    if (!finite) {
        s.growth_counter = 0;
        if (--s.hysteresis_left <= 0) r.back_off(r.o.min_scale);
    } else if (++s.growth_counter == r.o.growth_interval) {
        s.growth_counter = 0;
        s.hysteresis_left = r.o.hysteresis;
        r.grow();
    }
}

/// Cerebras: halve when the fraction of overflowing steps since the last rescale exceeds the tolerance,
/// double after N + 1 steps without that; the scale is clamped to [min, max] after every step.
void cerebras_step(RuleStep& r, bool finite) {
    LossScaleState& s = r.s;
    ++s.growth_counter;
    s.overflows_counted += finite ? 0 : 1;
    float u = s.scale;
    // The ratio and the tolerance in float32, as cerebras_pytorch compares them (its tensors).
    if (float(s.overflows_counted) / float(s.growth_counter) > float(r.o.overflow_tolerance)) {
        u /= 2.0f;
        ++s.backoffs;
        s.growth_counter = s.overflows_counted = 0;
    }
    if (s.growth_counter > r.o.growth_interval) {
        if (std::isfinite(u * 2.0f)) u *= 2.0f;
        ++s.growths;
        s.growth_counter = s.overflows_counted = 0;
    }
    // Clamped to max_scale, then (what get_non_clamped_scale() reports) to min_scale and never below
    // 2^-126 (the guard), even with min_scale 0.
    s.unclamped_scale = std::min(u, r.o.max_scale);
    s.scale = std::max(s.unclamped_scale, std::max(r.o.min_scale, smallest_scale));
}

/// Ascend (Huawei's TensorFlow adapter, ExponentialUpdateLossScaleManager): grow after N good steps; back
/// off by backoff_factor (not below 1) every decrease_every overflows, counted since the last rescale.
void ascend_step(RuleStep& r, bool finite) {
    LossScaleState& s = r.s;
    if (finite) {
        if (s.growth_counter + 1 >= r.o.growth_interval) {
            if (s.scale < 3.4e38f / static_cast<float>(r.o.growth_factor)) {
                s.scale = r.times(s.scale, r.o.growth_factor);
                ++s.growths;
            }
            s.growth_counter = s.overflows_counted = 0;
        } else {
            ++s.growth_counter;
        }
    } else if (s.overflows_counted + 1 >= r.o.decrease_every) {
        s.scale = std::max(1.0f, r.times(s.scale, r.o.backoff_factor));
        ++s.backoffs;
        s.growth_counter = s.overflows_counted = 0;
    } else {
        ++s.overflows_counted;
        s.growth_counter = 0;
    }
}

/// MindSpore (its DynamicLossScaleUpdateCell, which Model trains with): grow on the N-th finite step
/// since the last rescale (no check for overflow: the guard's), back off by multiplying with the float32
/// reciprocal of the one factor, never below 1. `iteration` and `last_overflow` are its cur_iter − 1 and
/// last_overflow_iter − 1 (set by growths too); `overflows_counted` counts overflows in a row (the bad
/// steps of its DynamicLossScaleManager).
void mindspore_step(RuleStep& r, bool finite) {
    LossScaleState& s = r.s;
    const float factor = static_cast<float>(r.o.growth_factor);
    const bool grow = s.iteration - s.last_overflow >= r.o.growth_interval;
    if (!finite) {
        const float floor = std::max(r.o.min_scale, 1.0f);
        s.scale = std::max({s.scale * (1.0f / factor), floor, smallest_scale});
        ++s.backoffs;
        ++s.overflows_counted;
        s.last_overflow = s.iteration;
        s.growth_counter = 0;
    } else {
        s.overflows_counted = 0;
        if (grow) {
            r.grow();
            s.last_overflow = s.iteration;
            s.growth_counter = 0;
        } else {
            ++s.growth_counter;
        }
    }
    ++s.iteration;
}

constexpr std::array<Rule, rule_count> rules{{
    {ScaleRule::mixprec,
     "mixprec",
     {},
     Product::float64,
     "growth_factor backoff_factor hysteresis min_scale max_scale at_min_scale",
     mixprec_step},
    {ScaleRule::keras,
     "keras",
     {.rule = ScaleRule::keras, .min_scale = 0.0f, .max_scale = inf},
     Product::float32,
     "growth_factor backoff_factor min_scale max_scale at_min_scale",
     keras_step},
    {ScaleRule::tf_keras,
     "tf_keras",
     {.rule = ScaleRule::tf_keras, .max_scale = inf},
     Product::float32,
     "growth_factor backoff_factor min_scale max_scale at_min_scale",
     tf_keras_step},
    {ScaleRule::pytorch,
     "pytorch",
     {.rule = ScaleRule::pytorch, .initial_scale = 65536.0f, .min_scale = 0.0f, .max_scale = inf},
     Product::float64,
     "growth_factor backoff_factor min_scale max_scale at_min_scale",
     keras_step},
    {ScaleRule::deepspeed,
     "deepspeed",
     {.rule = ScaleRule::deepspeed,
      .initial_scale = 65536.0f,
      .growth_interval = 1000,
      .hysteresis = 2,
      .max_scale = inf,
      .at_min_scale = AtMinScale::raise},
     Product::float64,
     "growth_factor backoff_factor hysteresis consecutive_hysteresis min_scale max_scale at_min_scale",
     deepspeed_step},
    {ScaleRule::megatron,
     "megatron",
     {.rule = ScaleRule::megatron,
      .initial_scale = 4294967296.0f,
      .growth_interval = 1000,
      .hysteresis = 2,
      .max_scale = inf},
     Product::float32,
     "growth_factor backoff_factor hysteresis min_scale max_scale at_min_scale",
     megatron_step},
    {ScaleRule::cerebras,
     "cerebras",
     {.rule = ScaleRule::cerebras, .min_scale = 0x1p-14f, .max_scale = 32768.0f},
     Product::float32,
     "overflow_tolerance min_scale max_scale",
     cerebras_step},
    {ScaleRule::ascend,
     "ascend",
     {.rule = ScaleRule::ascend,
      .initial_scale = 65536.0f,
      .growth_interval = 1000,
      .backoff_factor = 0.8f,
      .max_scale = inf,
      .decrease_every = 2},
     Product::float32,
     "growth_factor backoff_factor decrease_every",
     ascend_step},
    {ScaleRule::mindspore,
     "mindspore",
     {.rule = ScaleRule::mindspore, .initial_scale = 16777216.0f, .max_scale = inf},
     Product::float32,
     "growth_factor backoff_factor min_scale max_scale",
     mindspore_step},
}};

constexpr bool rules_follow_the_enum() {
    for (std::size_t i = 0; i < rules.size(); ++i)
        if (rules[i].rule != static_cast<ScaleRule>(i) || rules[i].preset.rule != rules[i].rule ||
            rules[i].name.empty() || rules[i].step == nullptr)
            return false;
    return true;
}
static_assert(rules_follow_the_enum(), "one row per ScaleRule, in the enum's order, each with its own preset");

} // namespace

const std::array<Rule, rule_count>& scale_rules() { return rules; }

std::string number_text(double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
}

float RuleStep::times(float scale, double factor) const {
    if (product == Product::float32) return scale * static_cast<float>(factor);
    return static_cast<float>(static_cast<double>(scale) * factor);
}

void RuleStep::grow() {
    const float grown = times(s.scale, o.growth_factor);
    if (std::isfinite(grown) && grown <= o.max_scale) {
        s.scale = grown;
        ++s.growths;
    }
}

void RuleStep::back_off(float floor) {
    if (s.scale <= floor && o.at_min_scale == AtMinScale::raise)
        throw loss_scale_error("the loss scale is already at its minimum (" + number_text(floor) +
                               ") and the gradients still overflow: they are not finite even unscaled. Lower the "
                               "learning rate, clip the gradients, look for NaN or inf in the inputs, or train in "
                               "bfloat16, whose range is float32's");
    s.scale = std::max({times(s.scale, o.backoff_factor), floor, smallest_scale});
    ++s.backoffs;
}

} // namespace mixprec::amp::detail
