#include <mixprec/amp/telemetry.hpp>

#include <algorithm>
#include <stdexcept>

namespace mixprec::amp {
namespace {

thread_local StepTelemetry* active_collector = nullptr;

} // namespace

void Telemetry::add(const std::string& name, const autodiff::RoundingStats& stats) {
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.first == name; });
    if (it == entries_.end())
        entries_.emplace_back(name, stats);
    else
        it->second += stats;
}

Telemetry& Telemetry::operator+=(const Telemetry& other) {
    for (const auto& [name, stats] : other.entries_) add(name, stats);
    return *this;
}

const autodiff::RoundingStats* Telemetry::find(const std::string& name) const {
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.first == name; });
    return it == entries_.end() ? nullptr : &it->second;
}

const autodiff::RoundingStats& Telemetry::operator[](const std::string& name) const {
    if (const auto* stats = find(name)) return *stats;
    throw std::out_of_range("Telemetry: no entry named '" + name + "'");
}

StepTelemetry::StepTelemetry(autodiff::RoundingRecorderOptions options)
    : options_(options), outer_(std::exchange(active_collector, this)) {}

StepTelemetry::~StepTelemetry() { active_collector = outer_; }

StepTelemetry* StepTelemetry::active() { return active_collector; }

void StepTelemetry::layer_called(const std::string& layer, const autodiff::Tensor& output,
                                 const autodiff::RoundingStats& forward) {
    auto it = std::find_if(layers_.begin(), layers_.end(), [&](const Layer& l) { return l.name == layer; });
    if (it == layers_.end()) it = layers_.insert(layers_.end(), Layer{layer, {}, {}});
    it->forward += forward;
    it->outputs.push_back(output);
}

Telemetry StepTelemetry::collect(const autodiff::GradientTape& tape,
                                 const std::vector<autodiff::Variable>& variables) const {
    if (!tape.options().telemetry)
        throw std::logic_error("StepTelemetry::collect: the tape was made without telemetry (GradientTapeOptions "
                               "{.telemetry = true})");
    Telemetry t;
    for (const autodiff::Variable& v : variables)
        if (auto stats = tape.gradient_stats(v)) t.add(v.name(), *stats);
    for (const Layer& layer : layers_) {
        autodiff::RoundingStats output_grad;
        bool any = false;
        for (const autodiff::Tensor& y : layer.outputs)
            if (auto stats = tape.gradient_stats(y)) {
                output_grad += *stats;
                any = true;
            }
        if (any) t.add(layer.name + "/output_grad", output_grad);
        t.add(layer.name + "/forward", layer.forward);
        t.add(layer.name + "/backward", tape.scope_stats(layer.name));
    }
    t.add("loss/backward", tape.scope_stats(""));
    t += added_;
    return t;
}

void StepTelemetry::add(const std::string& name, const autodiff::RoundingStats& stats) { added_.add(name, stats); }

void StepTelemetry::record(const autodiff::GradientTape& tape, const std::vector<autodiff::Variable>& variables) {
    result_ += collect(tape, variables);
    layers_.clear();
    added_ = {};
}

} // namespace mixprec::amp
