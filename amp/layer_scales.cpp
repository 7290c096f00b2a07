#include <mixprec/amp/layer_scales.hpp>

#include <mixprec/autodiff/tensor/rounding.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace mixprec::amp {
namespace {

constexpr const char* layer_value = "layer_scale/layer/";     // + "<position>/<name>": E
constexpr const char* unmoved_value = "layer_scale/unmoved/"; // + "<position>": n

/// The position in "<prefix><digits>" (with_name false) or "<prefix><digits>/<name>" (true), and the name;
/// std::invalid_argument naming `value` if it is not of that form.
std::pair<std::size_t, std::string> position_in(const std::string& value, std::string_view prefix, bool with_name) {
    const std::string rest = value.substr(prefix.size());
    const std::size_t slash = rest.find('/'), digits = std::min(slash, rest.size());
    const bool named = slash != std::string::npos && slash + 1 < rest.size();
    const bool form = with_name ? named : slash == std::string::npos;
    if (!form || digits == 0 || digits > 7 ||
        !std::all_of(rest.begin(), rest.begin() + long(digits), [](char c) { return c >= '0' && c <= '9'; }))
        throw std::invalid_argument("per-layer loss scale: malformed value name '" + value + "'");
    return {std::stoul(rest.substr(0, digits)), named ? rest.substr(slash + 1) : std::string()};
}

void check(const LayerScaleOptions& o) {
    if (o.margin < 0 || o.margin > 30) throw std::invalid_argument("LayerScaleOptions: margin must be in [0, 30]");
    if (o.window < 1 || o.window > 30) throw std::invalid_argument("LayerScaleOptions: window must be in [1, 30]");
    if (o.growth_interval < 1 || o.growth_interval > 1'000'000'000)
        throw std::invalid_argument("LayerScaleOptions: growth_interval must be in [1, 1e9]");
    if (o.min_exponent < -100 || o.max_exponent > 100 || o.min_exponent > o.max_exponent)
        throw std::invalid_argument("LayerScaleOptions: need -100 ≤ min_exponent ≤ max_exponent ≤ 100");
}

/// The least d ≥ 1 with amax · 2^-d < safe (exact: ldexp only moves the exponent).
int backoff(double amax, double safe) {
    if (!(amax > 0) || !std::isfinite(amax)) return 1;
    int d = std::max(1, std::ilogb(amax) - std::ilogb(safe));
    while (d > 1 && std::ldexp(amax, -(d - 1)) < safe) --d;
    while (std::ldexp(amax, -d) >= safe) ++d;
    return d;
}

/// The largest d with amax · 2^d < safe (amax > 0).
int growth(double amax, double safe) {
    int d = std::ilogb(safe) - std::ilogb(amax);
    while (std::ldexp(amax, d) >= safe) --d;
    while (std::ldexp(amax, d + 1) < safe) ++d;
    return d;
}

} // namespace

LayerScales::LayerScales(LayerScaleOptions options, int initial_loss_exponent)
    : options_(options), loss_exponent_(initial_loss_exponent), loss_unmoved_(options.growth_interval) {
    check(options_);
    if (initial_loss_exponent < options_.min_exponent || initial_loss_exponent > options_.max_exponent)
        throw std::invalid_argument("LayerScales: the initial loss exponent " + std::to_string(initial_loss_exponent) +
                                    " is outside [min_exponent, max_exponent]");
}

int LayerScales::exponent_after(std::size_t layer) const {
    return layer + 1 < layers_.size() ? layers_[layer + 1].exponent : loss_exponent_;
}

float LayerScales::factor(const std::string& layer) const {
    for (std::size_t i = 0; i < layers_.size(); ++i)
        if (layers_[i].name == layer) return std::ldexp(1.0f, layers_[i].exponent - exponent_after(i));
    return 1.0f;
}

float LayerScales::loss_scale() const { return std::ldexp(1.0f, loss_exponent_); }

float LayerScales::gradient_scale(const std::string& variable) const {
    const Layer* owner = nullptr;
    for (const Layer& l : layers_)
        if (variable.size() > l.name.size() && variable.starts_with(l.name) && variable[l.name.size()] == '/' &&
            (owner == nullptr || l.name.size() > owner->name.size()))
            owner = &l;
    return std::ldexp(1.0f, owner ? owner->exponent : loss_exponent_);
}

void LayerScales::observe(const autodiff::GradientTape& tape) {
    const std::vector<std::string>& scopes = tape.scopes();
    if (!scopes.empty()) { // the chain as this step ran it; known layers keep their exponents
        std::vector<Layer> chain(scopes.size());
        std::vector<Observed> pending(scopes.size());
        std::vector<bool> known(scopes.size(), false);
        for (std::size_t i = 0; i < scopes.size(); ++i) {
            chain[i].name = scopes[i];
            for (std::size_t j = 0; j < layers_.size(); ++j)
                if (layers_[j].name == scopes[i]) {
                    chain[i] = layers_[j];
                    pending[i] = observed_[j];
                    known[i] = true;
                }
        }
        for (std::size_t i = chain.size(); i-- > 0;)
            if (!known[i]) {
                chain[i].exponent = i + 1 < chain.size() ? chain[i + 1].exponent : loss_exponent_;
                chain[i].unmoved = options_.growth_interval;
            }
        layers_ = std::move(chain);
        observed_ = std::move(pending);
    }
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        observed_[i].stats += tape.scope_stats(layers_[i].name);
        observed_[i].seen = true;
    }
    loss_observed_.stats += tape.scope_stats("");
    loss_observed_.seen = true;
}

void LayerScales::step(int& exponent, std::int64_t& unmoved, const autodiff::RoundingStats& stats,
                       float threshold) const {
    const double safe = std::ldexp(double(threshold), -options_.margin);
    const double amax = stats.amax;
    const auto clamp = [&](int e) { return std::clamp(e, options_.min_exponent, options_.max_exponent); };
    if (stats.overflow > 0 || amax >= safe) {
        exponent = clamp(exponent - backoff(amax, safe));
        unmoved = 0;
    } else if (unmoved + 1 >= options_.growth_interval && amax > 0 && amax < std::ldexp(safe, -options_.window)) {
        exponent = clamp(exponent + growth(amax, safe));
        unmoved = 0;
    } else {
        unmoved = std::min(unmoved + 1, options_.growth_interval);
    }
}

void LayerScales::update(bool step_applied, autodiff::Dtype gradients) {
    const auto clamp = [&](int e) { return std::clamp(e, options_.min_exponent, options_.max_exponent); };
    if (gradients != autodiff::Dtype::float32) {
        const float threshold = autodiff::rounding_thresholds(gradients).overflow_min;
        bool overflowed = loss_observed_.stats.overflow > 0;
        for (const Observed& o : observed_) overflowed = overflowed || o.stats.overflow > 0;
        if (!step_applied && !overflowed) {
            loss_exponent_ = clamp(loss_exponent_ - 1);
            loss_unmoved_ = 0;
            for (Layer& l : layers_) {
                l.exponent = clamp(l.exponent - 1);
                l.unmoved = 0;
            }
        } else {
            if (loss_observed_.seen) step(loss_exponent_, loss_unmoved_, loss_observed_.stats, threshold);
            for (std::size_t i = 0; i < layers_.size(); ++i)
                if (observed_[i].seen) step(layers_[i].exponent, layers_[i].unmoved, observed_[i].stats, threshold);
        }
    }
    loss_observed_ = {};
    observed_.assign(layers_.size(), Observed{});
}

void LayerScales::agree(optim::Communicator& communicator) {
    std::vector<float> seen{loss_observed_.stats.overflow > 0 ? 1.0f : 0.0f, loss_observed_.stats.amax};
    for (const Observed& o : observed_) {
        seen.push_back(o.stats.overflow > 0 ? 1.0f : 0.0f);
        seen.push_back(o.stats.amax);
    }
    communicator.max(seen);
    const auto take = [](Observed& o, const float* agreed) {
        if (agreed[0] > 0) o.stats.overflow = std::max<std::uint64_t>(o.stats.overflow, 1);
        o.stats.amax = agreed[1];
    };
    take(loss_observed_, seen.data());
    for (std::size_t i = 0; i < observed_.size(); ++i) take(observed_[i], seen.data() + 2 * (i + 1));
}

std::vector<optim::StateValue> LayerScales::values() const {
    std::vector<optim::StateValue> v{
        {"layer_scale/margin", std::int64_t{options_.margin}},
        {"layer_scale/window", std::int64_t{options_.window}},
        {"layer_scale/min_exponent", std::int64_t{options_.min_exponent}},
        {"layer_scale/max_exponent", std::int64_t{options_.max_exponent}},
        {"layer_scale/growth_interval", options_.growth_interval},
        {"layer_scale/loss_exponent", std::int64_t{loss_exponent_}},
        {"layer_scale/loss_unmoved", loss_unmoved_},
        {"layer_scale/layers", std::int64_t(layers_.size())},
    };
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        v.push_back({layer_value + std::to_string(i) + "/" + layers_[i].name, std::int64_t{layers_[i].exponent}});
        v.push_back({unmoved_value + std::to_string(i), layers_[i].unmoved});
    }
    return v;
}

LayerScales LayerScales::from_values(std::span<const optim::StateValue> values) {
    std::map<std::string, std::int64_t> fields;
    std::map<std::size_t, Layer> layers;
    std::map<std::size_t, std::int64_t> unmoved;
    const auto integer = [](const optim::StateValue& v) {
        const auto* i = std::get_if<std::int64_t>(&v.value);
        if (!i) throw std::invalid_argument("per-layer loss scale: value '" + v.name + "' must be an integer");
        const bool counter = v.name == "layer_scale/layers" || v.name == "layer_scale/growth_interval" ||
                             v.name == "layer_scale/loss_unmoved" || v.name.starts_with(unmoved_value);
        const std::int64_t limit = counter ? 1'000'000'000 : 1000;
        if (*i < -limit || *i > limit)
            throw std::invalid_argument("per-layer loss scale: value '" + v.name + "' is out of range");
        return *i;
    };
    for (const optim::StateValue& v : values) {
        if (v.name.starts_with(unmoved_value)) {
            const std::size_t position = position_in(v.name, unmoved_value, /*with_name=*/false).first;
            if (!unmoved.emplace(position, integer(v)).second)
                throw std::invalid_argument("per-layer loss scale: value '" + v.name + "' is given twice");
            continue;
        }
        if (v.name.starts_with(layer_value)) {
            auto [position, name] = position_in(v.name, layer_value, /*with_name=*/true);
            if (!layers.emplace(position, Layer{std::move(name), int(integer(v)), 0}).second)
                throw std::invalid_argument("per-layer loss scale: layer position " + std::to_string(position) +
                                            " is given twice");
            continue;
        }
        if (!fields.emplace(v.name, integer(v)).second)
            throw std::invalid_argument("per-layer loss scale: value '" + v.name + "' is given twice");
    }
    const auto field = [&](const std::string& name) {
        auto it = fields.find("layer_scale/" + name);
        if (it == fields.end())
            throw std::invalid_argument("per-layer loss scale: value 'layer_scale/" + name + "' is missing");
        const std::int64_t value = it->second;
        fields.erase(it);
        return value;
    };
    LayerScaleOptions options{int(field("margin")), int(field("window")), field("growth_interval"),
                              int(field("min_exponent")), int(field("max_exponent"))};
    const std::int64_t loss = field("loss_exponent");
    const std::int64_t loss_unmoved = field("loss_unmoved");
    const std::int64_t count = field("layers");
    if (!fields.empty())
        throw std::invalid_argument("per-layer loss scale: unknown value '" + fields.begin()->first + "'");
    if (count < 0 || std::uint64_t(count) > max_layers || std::size_t(count) != layers.size() ||
        unmoved.size() != layers.size())
        throw std::invalid_argument("per-layer loss scale: " + std::to_string(layers.size()) +
                                    " layers for a count of " + std::to_string(count) + " (at most " +
                                    std::to_string(max_layers) + ")");
    LayerScales scales(options, int(loss));
    const auto check_unmoved = [&](std::int64_t n, const std::string& whose) {
        if (n < 0 || n > options.growth_interval)
            throw std::invalid_argument("per-layer loss scale: " + whose + " has " + std::to_string(n) +
                                        " steps unmoved, outside [0, growth_interval]");
        return n;
    };
    scales.loss_unmoved_ = check_unmoved(loss_unmoved, "the loss");
    for (auto [position, layer] : layers) {
        auto it = unmoved.find(position);
        if (it == unmoved.end())
            throw std::invalid_argument("per-layer loss scale: layer " + std::to_string(position) +
                                        " has no 'unmoved' count");
        layer.unmoved = check_unmoved(it->second, "layer '" + layer.name + "'");
        if (position != scales.layers_.size())
            throw std::invalid_argument("per-layer loss scale: layer positions are not 0.." +
                                        std::to_string(count - 1));
        if (layer.exponent < options.min_exponent || layer.exponent > options.max_exponent)
            throw std::invalid_argument("per-layer loss scale: layer '" + layer.name + "' has exponent " +
                                        std::to_string(layer.exponent) + ", outside [min_exponent, max_exponent]");
        scales.layers_.push_back(layer);
    }
    scales.observed_.assign(scales.layers_.size(), Observed{});
    return scales;
}

} // namespace mixprec::amp
