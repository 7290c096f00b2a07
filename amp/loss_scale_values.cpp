// A LossScaleOptimizer's options, state and counters as the named values of an optim::OptimizerState.

#include <mixprec/amp/loss_scale_optimizer.hpp>

#include <mixprec/amp/detail/loss_scale_rules.hpp>

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace mixprec::amp {
namespace {

using optim::StateValue;

/// Calls f(name, field) for every field a snapshot keeps, in the order the values are written. The one
/// list of the names: add a field here and it is saved, loaded and checked.
template <class Snapshot, class F>
void for_each_field(Snapshot& s, F&& f) {
    f("rule", s.options.rule);
    f("dynamic", s.options.dynamic);
    f("initial_scale", s.options.initial_scale);
    f("growth_interval", s.options.growth_interval);
    f("growth_factor", s.options.growth_factor);
    f("backoff_factor", s.options.backoff_factor);
    f("hysteresis", s.options.hysteresis);
    f("consecutive_hysteresis", s.options.consecutive_hysteresis);
    f("min_scale", s.options.min_scale);
    f("max_scale", s.options.max_scale);
    f("at_min_scale", s.options.at_min_scale);
    f("overflow_tolerance", s.options.overflow_tolerance);
    f("decrease_every", s.options.decrease_every);
    f("scale", s.state.scale);
    f("growth_counter", s.state.growth_counter);
    f("hysteresis_left", s.state.hysteresis_left);
    f("iteration", s.state.iteration);
    f("last_overflow", s.state.last_overflow);
    f("overflows_counted", s.state.overflows_counted);
    f("unclamped_scale", s.state.unclamped_scale);
    f("growths", s.state.growths);
    f("backoffs", s.state.backoffs);
    f("updates", s.state.updates);
    f("skipped_steps", s.skipped_steps);
    f("last_step_skipped", s.last_step_skipped);
    f("last_gradient_norm", s.last_gradient_norm);
}

std::string full_name(const char* field) {
    std::string name(loss_scale_prefix);
    name += field;
    return name;
}

/// "loss_scale/min_scale_schedule/<i>/<field>".
std::string schedule_name(std::size_t i, const char* field) {
    return full_name("min_scale_schedule/") + std::to_string(i) + "/" + field;
}

StateValue::Value to_value(bool b) { return std::int64_t{b ? 1 : 0}; }
StateValue::Value to_value(std::int64_t i) { return i; }
StateValue::Value to_value(float f) { return static_cast<double>(f); }
StateValue::Value to_value(double d) { return d; }
template <class E>
requires std::is_enum_v<E> StateValue::Value to_value(E e) { return static_cast<std::int64_t>(e); }

[[noreturn]] void bad(const std::string& name, const std::string& why) {
    throw std::invalid_argument("load_state: value '" + name + "' " + why);
}

std::int64_t integer(const std::string& name, const StateValue::Value& v) {
    if (const auto* i = std::get_if<std::int64_t>(&v)) return *i;
    bad(name, "is a real, an integer is kept there");
}
double real(const std::string& name, const StateValue::Value& v) {
    if (const auto* d = std::get_if<double>(&v)) return *d;
    bad(name, "is an integer, a real is kept there");
}

void from_value(const std::string& name, const StateValue::Value& v, std::int64_t& out) { out = integer(name, v); }
void from_value(const std::string& name, const StateValue::Value& v, double& out) { out = real(name, v); }
void from_value(const std::string& name, const StateValue::Value& v, float& out) {
    const double d = real(name, v);
    out = static_cast<float>(d);
    if (!(static_cast<double>(out) == d || (std::isnan(d) && std::isnan(out))))
        bad(name, "= " + detail::number_text(d) + " is not a float32 value");
}
void from_value(const std::string& name, const StateValue::Value& v, bool& out) {
    const std::int64_t i = integer(name, v);
    if (i != 0 && i != 1) bad(name, "is a flag, 0 or 1, got " + std::to_string(i));
    out = i == 1;
}
void from_value(const std::string& name, const StateValue::Value& v, ScaleRule& out) {
    const std::int64_t i = integer(name, v);
    const std::optional<ScaleRule> rule = i < 0 ? std::nullopt : scale_rule_at(static_cast<std::uint64_t>(i));
    if (!rule) bad(name, "names no rule: unknown value " + std::to_string(i));
    out = *rule;
}
void from_value(const std::string& name, const StateValue::Value& v, AtMinScale& out) {
    const std::int64_t i = integer(name, v);
    if (i != static_cast<std::int64_t>(AtMinScale::keep_going) && i != static_cast<std::int64_t>(AtMinScale::raise))
        bad(name, "names no choice: unknown value " + std::to_string(i));
    out = static_cast<AtMinScale>(i);
}

} // namespace

std::vector<StateValue> loss_scale_values(const LossScaleSnapshot& snapshot) {
    std::vector<StateValue> values;
    for_each_field(snapshot, [&](const char* field, const auto& value) {
        values.push_back({full_name(field), to_value(value)});
    });
    const std::vector<MinScaleStep>& schedule = snapshot.options.min_scale_schedule;
    for (std::size_t i = 0; i < schedule.size(); ++i) {
        values.push_back({schedule_name(i, "step"), to_value(schedule[i].step)});
        values.push_back({schedule_name(i, "scale"), to_value(schedule[i].scale)});
    }
    return values;
}

LossScaleSnapshot loss_scale_snapshot(std::span<const StateValue> values) {
    std::map<std::string, const StateValue::Value*> given;
    for (const StateValue& v : values)
        if (!given.emplace(v.name, &v.value).second) bad(v.name, "appears twice");
    LossScaleSnapshot s;
    for_each_field(s, [&](const char* field, auto& out) {
        const std::string name = full_name(field);
        const auto it = given.find(name);
        if (it == given.end()) {
            if (name == full_name("updates")) return; // saved before min_scale_schedule existed: 0
            bad(name, "is missing");
        }
        from_value(name, *it->second, out);
        given.erase(it);
    });
    // The schedule's entries, 0, 1, ... while an entry's values are there: at most max_min_scale_steps + 1
    // are read (LossScale refuses more), so a hostile state cannot make it allocate without bound.
    std::vector<MinScaleStep>& schedule = s.options.min_scale_schedule;
    while (schedule.size() <= max_min_scale_steps) {
        const std::string step = schedule_name(schedule.size(), "step"),
                          scale = schedule_name(schedule.size(), "scale");
        const auto i = given.find(step), j = given.find(scale);
        if (i == given.end() && j == given.end()) break;
        if (i == given.end() || j == given.end()) bad(i == given.end() ? step : scale, "is missing");
        MinScaleStep e;
        from_value(step, *i->second, e.step);
        from_value(scale, *j->second, e.scale);
        schedule.push_back(e);
        given.erase(i);
        given.erase(j);
    }
    if (!given.empty()) bad(given.begin()->first, "is not one a LossScaleOptimizer keeps");
    try {
        LossScale check(s.options);
        check.set_state(s.state);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("load_state: invalid loss scale: ") + e.what());
    }
    if (s.skipped_steps < 0) bad(full_name("skipped_steps"), "is negative: " + std::to_string(s.skipped_steps));
    return s;
}

} // namespace mixprec::amp
