#include <mixprec/amp/loss_scale.hpp>

#include <mixprec/amp/detail/loss_scale_rules.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>

namespace mixprec::amp {
namespace {

using detail::number_text;

[[noreturn]] void bad(const std::string& option, const std::string& why) {
    throw std::invalid_argument("LossScaleOptions." + option + " " + why);
}

} // namespace

std::optional<ScaleRule> scale_rule_at(std::uint64_t index) {
    if (index >= detail::rule_count) return std::nullopt;
    return static_cast<ScaleRule>(index);
}

std::string_view name_of(ScaleRule rule) { return detail::scale_rules().at(static_cast<std::size_t>(rule)).name; }

std::vector<std::string_view> loss_scale_preset_names() {
    std::vector<std::string_view> names;
    for (const detail::Rule& r : detail::scale_rules()) names.push_back(r.name);
    return names;
}

LossScaleOptions loss_scale_preset(std::string_view name) {
    std::string names;
    for (const detail::Rule& r : detail::scale_rules()) {
        if (r.name == name) return r.preset;
        names += (names.empty() ? "" : ", ") + std::string(r.name);
    }
    throw std::invalid_argument("unknown loss scale preset '" + std::string(name) + "' (valid: " + names + ")");
}

bool rule_reads(ScaleRule rule, std::string_view option) {
    static constexpr std::string_view every_rule[] = {"rule", "dynamic", "initial_scale", "growth_interval",
                                                      "min_scale_schedule"};
    static constexpr std::string_view fields[] = {"growth_factor",          "backoff_factor",     "hysteresis",
                                                  "consecutive_hysteresis", "min_scale",          "max_scale",
                                                  "at_min_scale",           "overflow_tolerance", "decrease_every"};
    if (std::ranges::find(every_rule, option) != std::end(every_rule)) return true;
    if (std::ranges::find(fields, option) == std::end(fields))
        throw std::invalid_argument("LossScaleOptions has no field '" + std::string(option) + "'");
    const std::string_view reads = detail::scale_rules().at(static_cast<std::size_t>(rule)).reads;
    for (std::size_t begin = 0; begin < reads.size();) {
        const std::size_t end = std::min(reads.find(' ', begin), reads.size());
        if (reads.substr(begin, end - begin) == option) return true;
        begin = end + 1;
    }
    return false;
}

LossScaleOptions loss_scale_preset(std::string_view name, autodiff::Dtype half) {
    LossScaleOptions o = loss_scale_preset(name);
    if (o.rule == ScaleRule::cerebras && half == autodiff::Dtype::cbfloat16) o.initial_scale = o.max_scale = 0x1p31f;
    return o;
}

LossScale::LossScale(LossScaleOptions o) : options_(o) {
    if (!scale_rule_at(static_cast<std::uint64_t>(o.rule)))
        bad("rule", "must name a rule, got " + std::to_string(static_cast<unsigned>(o.rule)));
    const auto finite_positive = [](float v) { return std::isfinite(v) && v > 0; };
    if (!finite_positive(o.initial_scale))
        bad("initial_scale", "must be finite and > 0, got " + number_text(o.initial_scale));
    if (o.growth_interval < 1) bad("growth_interval", "must be ≥ 1, got " + std::to_string(o.growth_interval));
    if (!(o.growth_factor > 1) || !std::isfinite(o.growth_factor))
        bad("growth_factor", "must be finite and > 1, got " + number_text(o.growth_factor));
    if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
        bad("backoff_factor", "must be in (0, 1), got " + number_text(o.backoff_factor));
    if (o.rule == ScaleRule::mindspore && o.backoff_factor != 1 / o.growth_factor)
        bad("backoff_factor", "must be 1 / growth_factor (" + number_text(1 / o.growth_factor) +
                                  ") under the mindspore rule, which backs off by dividing by its one factor; got " +
                                  number_text(o.backoff_factor));
    if (o.hysteresis < 1) bad("hysteresis", "must be ≥ 1, got " + std::to_string(o.hysteresis));
    if (!(o.min_scale >= 0) || std::isinf(o.min_scale))
        bad("min_scale", "must be finite and ≥ 0, got " + number_text(o.min_scale));
    if (!(o.max_scale >= o.min_scale))
        bad("max_scale", "must be ≥ min_scale (" + number_text(o.min_scale) + "), got " + number_text(o.max_scale));
    if (o.dynamic && (o.initial_scale < o.min_scale || o.initial_scale > o.max_scale))
        bad("initial_scale", "must lie in [min_scale, max_scale] = [" + number_text(o.min_scale) + ", " +
                                 number_text(o.max_scale) + "], got " + number_text(o.initial_scale));
    if (!(o.overflow_tolerance >= 0 && o.overflow_tolerance < 1))
        bad("overflow_tolerance", "must be in [0, 1), got " + number_text(o.overflow_tolerance));
    if (o.decrease_every < 1) bad("decrease_every", "must be ≥ 1, got " + std::to_string(o.decrease_every));
    check_schedule(o);
    state_.scale = state_.unclamped_scale = std::max(o.initial_scale, floor_at(0));
    state_.hysteresis_left = o.hysteresis;
}

void LossScale::check_schedule(const LossScaleOptions& o) {
    const std::vector<MinScaleStep>& schedule = o.min_scale_schedule;
    if (schedule.empty()) return;
    if (!o.dynamic) bad("min_scale_schedule", "needs a dynamic scale: a fixed scale never moves");
    if (schedule.size() > max_min_scale_steps)
        bad("min_scale_schedule",
            "has " + std::to_string(schedule.size()) + " entries, more than " + std::to_string(max_min_scale_steps));
    for (std::size_t i = 0; i < schedule.size(); ++i) {
        const MinScaleStep& e = schedule[i];
        const std::string at = "min_scale_schedule[" + std::to_string(i) + "]";
        if (e.step < 0) bad(at + ".step", "must be ≥ 0, got " + std::to_string(e.step));
        if (i > 0 && e.step <= schedule[i - 1].step)
            bad(at + ".step", "must come after the step before (" + std::to_string(schedule[i - 1].step) + "), got " +
                                  std::to_string(e.step));
        if (!(std::isfinite(e.scale) && e.scale > 0 && e.scale <= o.max_scale))
            bad(at + ".scale",
                "must be finite, > 0 and ≤ max_scale (" + number_text(o.max_scale) + "), got " + number_text(e.scale));
        if (i > 0 && e.scale < schedule[i - 1].scale)
            bad(at + ".scale", "must not fall below the step before's (" + number_text(schedule[i - 1].scale) +
                                   "): the floor rises, got " + number_text(e.scale));
    }
}

float LossScale::floor_at(std::int64_t updates) const {
    float floor = 0.0f;
    for (const MinScaleStep& e : options_.min_scale_schedule)
        if (e.step <= updates) floor = e.scale;
    return floor;
}

void LossScale::set_state(const LossScaleState& s) {
    if (!(std::isfinite(s.scale) && s.scale > 0))
        bad("state.scale", "must be finite and > 0, got " + number_text(s.scale));
    state_ = s;
}

void LossScale::update(bool finite) {
    if (!options_.dynamic) return;
    const LossScaleState before = state_; // a raise at min_scale leaves the state as it was
    try {
        const detail::Rule& rule = detail::scale_rules()[static_cast<std::size_t>(options_.rule)];
        detail::RuleStep step{state_, options_, rule.product};
        rule.step(step, finite);
        ++state_.updates;
        state_.scale = std::max(state_.scale, floor_at(state_.updates));
    } catch (...) {
        state_ = before;
        throw;
    }
}

} // namespace mixprec::amp
