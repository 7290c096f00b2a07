// Fp8Scaling's state as named values of an optimizer's state (see fp8_scaling.hpp).

#include <mixprec/amp/fp8_scaling.hpp>

#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace mixprec::amp {
namespace {

using autodiff::Dtype;

// "fp8/tensor/<i>/<name>" (its format), "fp8/scale/<i>", "fp8/history/<i>/<j>"
constexpr std::string_view tensor_value = "fp8/tensor/", scale_value = "fp8/scale/", history_value = "fp8/history/";

[[noreturn]] void refuse(const std::string& name, const std::string& why) {
    throw std::invalid_argument("fp8 scaling: value '" + name + "' " + why);
}

/// The number at the start of `text` (digits only, below `limit`), and what follows it.
std::pair<std::size_t, std::string_view> index_in(const std::string& name, std::string_view text, std::size_t limit) {
    std::size_t i = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), i);
    if (error != std::errc() || end == text.data() || i >= limit) refuse(name, "has no valid position");
    return {i, text.substr(std::size_t(end - text.data()))};
}

std::int64_t integer(const optim::StateValue& v, std::int64_t lo, std::int64_t hi) {
    const auto* i = std::get_if<std::int64_t>(&v.value);
    if (!i) refuse(v.name, "must be an integer");
    if (*i < lo || *i > hi) refuse(v.name, "is out of range");
    return *i;
}

float real(const optim::StateValue& v, bool positive) {
    const auto* d = std::get_if<double>(&v.value);
    if (!d) refuse(v.name, "must be a real number");
    const auto f = static_cast<float>(*d);
    if (double(f) != *d || !std::isfinite(f) || f < 0 || (positive && f == 0))
        refuse(v.name, positive ? "must be a finite float32 > 0" : "must be a finite float32 ≥ 0");
    return f;
}

Dtype fp8_format(const optim::StateValue& v) {
    const auto format = static_cast<Dtype>(integer(v, 0, 255));
    if (format != Dtype::float8_e4m3 && format != Dtype::float8_e5m2) refuse(v.name, "is not an FP8 format");
    return format;
}

} // namespace

std::vector<optim::StateValue> Fp8Scaling::values() const {
    std::vector<optim::StateValue> v{
        {"fp8/recipe", std::int64_t(options_.recipe)},
        {"fp8/history_length", options_.history_length},
        {"fp8/amax_compute", std::int64_t(options_.amax_compute)},
        {"fp8/margin", std::int64_t{options_.margin}},
        {"fp8/epsilon", double(options_.epsilon)},
        {"fp8/power_of_two", std::int64_t{options_.power_of_two}},
        {"fp8/forward", std::int64_t(options_.forward)},
        {"fp8/backward", std::int64_t(options_.backward)},
        {"fp8/scale_gradients", std::int64_t{options_.scale_gradients}},
        {"fp8/stochastic_gradients", std::int64_t{options_.stochastic_gradients}},
        {"fp8/seed", std::bit_cast<std::int64_t>(options_.seed)},
        {"fp8/steps", std::int64_t(steps_)},
        {"fp8/tensors", std::int64_t(tensors_.size())},
    };
    std::size_t i = 0;
    for (const auto& [name, t] : tensors_) {
        const std::string at = std::to_string(i++);
        v.push_back({std::string(tensor_value) + at + "/" + name, std::int64_t(t.format)});
        v.push_back({std::string(scale_value) + at, double(t.scale)});
        for (std::size_t j = 0; j < t.history.size(); ++j)
            v.push_back({std::string(history_value) + at + "/" + std::to_string(j), double(t.history[j])});
    }
    return v;
}

Fp8Scaling Fp8Scaling::from_values(std::span<const optim::StateValue> values) {
    std::map<std::string, const optim::StateValue*> fields;
    std::map<std::size_t, std::pair<std::string, Dtype>> names;
    std::map<std::size_t, float> scales;
    std::map<std::size_t, std::map<std::size_t, float>> histories;
    for (const optim::StateValue& v : values) {
        const std::string_view n = v.name;
        bool fresh = true;
        if (n.starts_with(tensor_value)) {
            const auto [i, rest] = index_in(v.name, n.substr(tensor_value.size()), max_tensors);
            if (rest.size() < 2 || rest[0] != '/') refuse(v.name, "names no tensor");
            fresh = names.emplace(i, std::pair{std::string(rest.substr(1)), fp8_format(v)}).second;
        } else if (n.starts_with(scale_value)) {
            const auto [i, rest] = index_in(v.name, n.substr(scale_value.size()), max_tensors);
            if (!rest.empty()) refuse(v.name, "is not a scale's name");
            fresh = scales.emplace(i, real(v, true)).second;
        } else if (n.starts_with(history_value)) {
            const auto [i, rest] = index_in(v.name, n.substr(history_value.size()), max_tensors);
            if (rest.empty() || rest[0] != '/') refuse(v.name, "is not a history entry's name");
            const auto [j, tail] = index_in(v.name, rest.substr(1), 1024);
            if (!tail.empty()) refuse(v.name, "is not a history entry's name");
            fresh = histories[i].emplace(j, real(v, false)).second;
        } else {
            fresh = fields.emplace(v.name, &v).second;
        }
        if (!fresh) refuse(v.name, "is given twice");
    }
    const auto field = [&](const char* name) -> const optim::StateValue& {
        const auto it = fields.find(std::string("fp8/") + name);
        if (it == fields.end()) refuse(std::string("fp8/") + name, "is missing");
        const optim::StateValue& v = *it->second;
        fields.erase(it);
        return v;
    };
    Fp8ScalingOptions o;
    o.recipe = static_cast<Fp8Recipe>(integer(field("recipe"), 0, 1));
    o.history_length = integer(field("history_length"), 1, 1024);
    o.amax_compute = static_cast<AmaxCompute>(integer(field("amax_compute"), 0, 1));
    o.margin = int(integer(field("margin"), 0, 32));
    o.epsilon = real(field("epsilon"), false);
    o.power_of_two = integer(field("power_of_two"), 0, 1) != 0;
    o.forward = fp8_format(field("forward"));
    o.backward = fp8_format(field("backward"));
    // Absent from states saved before they existed: scaled, rounded to nearest, no steps counted.
    if (fields.contains("fp8/scale_gradients")) o.scale_gradients = integer(field("scale_gradients"), 0, 1) != 0;
    if (fields.contains("fp8/stochastic_gradients") || fields.contains("fp8/seed")) {
        o.stochastic_gradients = integer(field("stochastic_gradients"), 0, 1) != 0;
        o.seed = std::bit_cast<std::uint64_t>(
            integer(field("seed"), std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
    }
    std::uint64_t steps = 0;
    if (fields.contains("fp8/steps"))
        steps = std::uint64_t(integer(field("steps"), 0, std::numeric_limits<std::int64_t>::max()));
    const auto count = std::size_t(integer(field("tensors"), 0, std::int64_t(max_tensors)));
    if (!fields.empty()) refuse(fields.begin()->first, "is not a value of FP8 scaling");

    Fp8Scaling scaling(o);
    scaling.steps_ = steps;
    if (names.size() != count || scales.size() != count || (!names.empty() && names.rbegin()->first != count - 1) ||
        (!scales.empty() && scales.rbegin()->first != count - 1) ||
        (!histories.empty() && histories.rbegin()->first >= count))
        throw std::invalid_argument("fp8 scaling: 'fp8/tensors' says " + std::to_string(count) +
                                    ", and the tensors, scales and histories given do not match it");
    for (const auto& [i, entry] : names) {
        Tensor t{.format = entry.second, .scale = scales.at(i)};
        const auto h = histories.find(i);
        if (h != histories.end()) {
            if (h->second.size() > std::size_t(o.history_length) || h->second.rbegin()->first != h->second.size() - 1)
                throw std::invalid_argument("fp8 scaling: the history of '" + entry.first +
                                            "' has gaps or is longer than history_length");
            for (const auto& [j, amax] : h->second) t.history.push_back(amax);
        }
        if (!scaling.tensors_.emplace(entry.first, std::move(t)).second)
            throw std::invalid_argument("fp8 scaling: tensor '" + entry.first + "' is given twice");
    }
    return scaling;
}

} // namespace mixprec::amp
