#include <mixprec/optim/optimizer.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

namespace mixprec::optim {

namespace {
std::string quoted(const Variable& v) { return "'" + v.name() + "'"; }

double squared_norm(const std::vector<float>& g) {
    double sum = 0;
    for (float x : g) sum += double(x) * double(x);
    return sum;
}

void scale_if_above(std::vector<float>& g, double norm, double c) {
    if (!(norm > c)) return; // also leaves a NaN norm alone: non-finite gradients are not ours to fix
    const float factor = float(c / norm);
    for (float& x : g) x *= factor;
}
} // namespace

void validate(const Clipping& clip) {
    const int set =
        int(clip.clipnorm.has_value()) + int(clip.global_clipnorm.has_value()) + int(clip.clipvalue.has_value());
    if (set > 1) throw std::invalid_argument("Clipping: set at most one of clipnorm, global_clipnorm and clipvalue");
    auto check = [](const std::optional<float>& c, const char* name) {
        if (c && !(std::isfinite(*c) && *c > 0)) {
            std::ostringstream message;
            message << "Clipping: " << name << " must be finite and > 0 (got " << *c << ")";
            throw std::invalid_argument(message.str());
        }
    };
    check(clip.clipnorm, "clipnorm");
    check(clip.global_clipnorm, "global_clipnorm");
    check(clip.clipvalue, "clipvalue");
}

void clip_gradients(const Clipping& clip, std::vector<std::vector<float>>& grads) {
    if (clip.clipnorm) {
        for (auto& g : grads) scale_if_above(g, std::sqrt(squared_norm(g)), *clip.clipnorm);
    } else if (clip.global_clipnorm) {
        double sum = 0;
        for (const auto& g : grads) sum += squared_norm(g);
        for (auto& g : grads) scale_if_above(g, std::sqrt(sum), *clip.global_clipnorm);
    } else if (clip.clipvalue) {
        const float c = *clip.clipvalue;
        for (auto& g : grads)
            for (float& x : g) x = std::clamp(x, -c, c);
    }
}

SlotOptimizer::SlotOptimizer(LearningRate learning_rate, Clipping clip)
    : learning_rate_(std::move(learning_rate)), clip_(clip) {
    validate(clip_);
}

void accumulate_float32(std::vector<std::vector<float>>& sums, const std::vector<Tensor>& grads, std::string_view who) {
    if (sums.empty()) {
        sums.resize(grads.size());
        for (std::size_t i = 0; i < grads.size(); ++i) sums[i].assign(grads[i].size(), 0.0f);
    } else if (grads.size() != sums.size()) {
        throw std::invalid_argument(std::string(who) + ": " + std::to_string(grads.size()) +
                                    " gradients, the earlier micro-batches had " + std::to_string(sums.size()));
    }
    std::vector<float> wide;
    for (std::size_t i = 0; i < grads.size(); ++i) {
        if (grads[i].size() != sums[i].size())
            throw std::invalid_argument(std::string(who) + ": gradient " + std::to_string(i) + " is " +
                                        grads[i].description() + ", earlier ones had " +
                                        std::to_string(sums[i].size()) + " elements");
        wide.resize(grads[i].size());
        autodiff::widen(grads[i].raw(), grads[i].dtype(), wide.data(), wide.size());
        for (std::size_t j = 0; j < wide.size(); ++j) sums[i][j] += wide[j];
    }
}

bool Optimizer::apply(const std::vector<Tensor>& grads, const std::vector<Variable>& variables) {
    if (grads.size() != variables.size())
        throw std::invalid_argument("Optimizer::apply: " + std::to_string(grads.size()) + " gradients for " +
                                    std::to_string(variables.size()) + " variables");
    for (std::size_t i = 0; i < grads.size(); ++i)
        if (grads[i].shape() != variables[i].shape())
            throw std::invalid_argument("Optimizer::apply: the gradient of variable " + quoted(variables[i]) +
                                        " has shape " + grads[i].shape().to_string() + ", the variable has shape " +
                                        variables[i].shape().to_string());
    widened_.resize(grads.size());
    for (std::size_t i = 0; i < grads.size(); ++i) {
        widened_[i].resize(grads[i].size());
        autodiff::widen(grads[i].raw(), grads[i].dtype(), widened_[i].data(), grads[i].size());
    }
    return apply_float32(widened_, variables);
}

bool SlotOptimizer::apply_float32(std::vector<std::vector<float>>& grads, const std::vector<Variable>& variables) {
    if (grads.size() != variables.size())
        throw std::invalid_argument("Optimizer::apply: " + std::to_string(grads.size()) + " gradients for " +
                                    std::to_string(variables.size()) + " variables");
    for (std::size_t i = 0; i < grads.size(); ++i)
        if (grads[i].size() != variables[i].value().size())
            throw std::invalid_argument("Optimizer::apply: the gradient of variable " + quoted(variables[i]) + " has " +
                                        std::to_string(grads[i].size()) + " elements, the variable has " +
                                        std::to_string(variables[i].value().size()));
    place(variables, "Optimizer::apply");
    clip_gradients(clip_, grads);
    const float lr = learning_rate_.at(iterations_);
    for (std::size_t i = 0; i < variables.size(); ++i) {
        Variable v = variables[i]; // a handle to the same variable; master_data() needs a non-const one
        update(positions_[i], v.master_data(), grads[i], lr, iterations_ + 1);
        v.mark_changed();
    }
    ++iterations_;
    return true;
}

void SlotOptimizer::build(const std::vector<Variable>& variables) { place(variables, "Optimizer::build"); }

void SlotOptimizer::place(const std::vector<Variable>& variables, const char* who) {
    constexpr std::size_t unseen = std::size_t(-1);
    const auto twice = [&](std::size_t i) {
        std::size_t first = 0;
        while (!(variables[first] == variables[i])) ++first;
        return std::invalid_argument(std::string(who) + ": variable " + quoted(variables[i]) +
                                     " is passed twice (positions " + std::to_string(first) + " and " +
                                     std::to_string(i) + ")");
    };
    // Check everything first: a refused call changes nothing (the marks in last_call_ are this call's own).
    ++calls_;
    positions_.resize(variables.size());
    std::unordered_set<std::uint64_t> fresh; // uids of this call's unseen variables (none: no allocation)
    for (std::size_t i = 0; i < variables.size(); ++i) {
        const Variable& v = variables[i];
        const auto it = index_.find(v.uid());
        if (it == index_.end()) {
            if (!fresh.insert(v.uid()).second) throw twice(i);
            positions_[i] = unseen;
            continue;
        }
        const std::size_t p = it->second;
        if (last_call_[p] == calls_) throw twice(i);
        last_call_[p] = calls_; // a variable's shape never changes: its slots still fit it
        positions_[i] = p;
    }
    // Now change things: zero slots for the unseen variables, in the order of the call.
    if (!built_) {
        names_ = slot_names();
        slots_.assign(names_.size(), {});
        built_ = true;
    }
    if (fresh.empty()) return;
    for (std::size_t i = 0; i < variables.size(); ++i) {
        if (positions_[i] != unseen) continue;
        const Variable& v = variables[i];
        const std::size_t p = variables_.size(), n = v.value().size();
        variables_.push_back(v);
        index_.emplace(v.uid(), p);
        last_call_.push_back(calls_);
        for (auto& per_variable : slots_) per_variable.emplace_back(n, 0.0f);
        positions_[i] = p;
    }
}

std::vector<Optimizer::Slot> SlotOptimizer::slots() const {
    std::vector<Slot> out;
    for (std::size_t s = 0; s < names_.size(); ++s)
        for (std::size_t i = 0; i < slots_[s].size(); ++i) out.push_back({names_[s], i, slots_[s][i]});
    return out;
}

std::span<float> SlotOptimizer::slot_data(std::string_view name, std::size_t variable) {
    const auto it = std::find(names_.begin(), names_.end(), name);
    if (it == names_.end() || variable >= slots_[std::size_t(it - names_.begin())].size()) {
        const std::string known =
            built_ ? " (the optimizer knows " + std::to_string(variables_.size()) + " variables)" : " (not built yet)";
        throw std::invalid_argument("Optimizer::slot_data: no slot '" + std::string(name) + "' for variable " +
                                    std::to_string(variable) + known);
    }
    return slots_[std::size_t(it - names_.begin())][variable];
}

void SlotOptimizer::set_iterations(std::int64_t iterations) {
    if (iterations < 0)
        throw std::invalid_argument("Optimizer::set_iterations: " + std::to_string(iterations) + " < 0");
    iterations_ = iterations;
}

} // namespace mixprec::optim
