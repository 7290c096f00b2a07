// Optimizer::state and Optimizer::load_state: an optimizer's slots and step count, detached and put back.

#include <mixprec/optim/optimizer.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

namespace mixprec::optim {
namespace {

using SlotKey = std::pair<std::string, std::uint64_t>;

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument("load_state: " + message); }

std::string quoted(std::string_view s) {
    std::string q = "'";
    q += s;
    q += "'";
    return q;
}

std::string slot_text(const SlotKey& key) {
    return "slot " + quoted(key.first) + " of variable " + std::to_string(key.second);
}

/// Throws unless the optimizer's slots are exactly the state's (names, variables, sizes).
void check_same_slots(const std::vector<Optimizer::Slot>& current, const std::vector<SlotState>& saved) {
    std::map<SlotKey, std::size_t> have;
    for (const auto& s : current) have[{s.name, s.variable}] = s.values.size();
    std::map<SlotKey, std::size_t> want;
    for (const auto& s : saved) want[{s.name, s.variable}] = s.values.size();
    for (const auto& [key, size] : want) {
        const auto it = have.find(key);
        if (it == have.end()) fail("the state has " + slot_text(key) + ", the optimizer has not");
        if (it->second != size)
            fail(slot_text(key) + " has " + std::to_string(size) + " values in the state, " +
                 std::to_string(it->second) + " in the optimizer");
    }
    for (const auto& [key, size] : have)
        if (!want.contains(key)) fail("the optimizer has " + slot_text(key) + ", the state has not");
}

/// Everything that can be checked without changing the optimizer.
void check(const Optimizer& optimizer, const OptimizerState& state, const std::vector<Variable>& variables) {
    if (state.kind != optimizer.kind())
        fail("the state is of optimizer " + quoted(state.kind) + ", this optimizer is " + quoted(optimizer.kind()));
    if (state.iterations < 0) fail("negative iteration count " + std::to_string(state.iterations));
    for (const StateValue& v : state.values) {
        if (v.name != learning_rate_value)
            fail("the state holds value " + quoted(v.name) + ", which optimizer " + quoted(optimizer.kind()) +
                 " does not keep");
        const double* lr = std::get_if<double>(&v.value);
        if (!lr || !std::isfinite(*lr) || *lr < 0 || double(float(*lr)) != *lr)
            fail("the learning rate in the state is not a float32 value ≥ 0");
        if (optimizer.learning_rate().schedule())
            fail("the state holds a constant learning rate, this optimizer follows the schedule " +
                 quoted(optimizer.learning_rate().schedule()->name()));
    }
    if (state.values.size() > 1) fail("the state holds the learning rate twice");
    if (!state.built && !state.slots.empty()) fail("an optimizer that was never built cannot have slots");
    std::map<SlotKey, bool> seen;
    for (const SlotState& slot : state.slots) {
        const SlotKey key{slot.name, slot.variable};
        if (!seen.emplace(key, true).second) fail(slot_text(key) + " appears twice");
        if (slot.variable >= variables.size())
            fail(slot_text(key) + ": there are " + std::to_string(variables.size()) + " variables");
        const Variable& v = variables[slot.variable];
        if (slot.values.size() != v.value().size())
            fail(slot_text(key) + " has " + std::to_string(slot.values.size()) + " values, variable " +
                 quoted(v.name()) + " " + std::to_string(v.value().size()));
    }
}

} // namespace

OptimizerState Optimizer::state() const {
    OptimizerState s;
    s.kind = kind();
    s.iterations = iterations();
    s.built = built();
    for (const Slot& slot : slots())
        s.slots.push_back({slot.name, slot.variable, std::vector<float>(slot.values.begin(), slot.values.end())});
    if (!learning_rate().schedule()) s.values.push_back({learning_rate_value, double(learning_rate().at(0))});
    return s;
}

void Optimizer::load_state(const OptimizerState& state, const std::vector<Variable>& variables) {
    check(*this, state, variables);
    if (built()) {
        try {
            build(variables); // built already: only checks the variables
        } catch (const std::invalid_argument& e) {
            fail(std::string("the optimizer was built for other variables: ") + e.what());
        }
        if (state.built) check_same_slots(slots(), state.slots);
    }
    // Everything checked: now change things. Building is the one step that can still fail.
    if (state.built) {
        if (!built()) {
            try {
                build(variables);
            } catch (const std::invalid_argument& e) {
                fail(std::string("cannot build the optimizer: ") + e.what());
            }
            check_same_slots(slots(), state.slots); // the one check that needs a built optimizer
        }
        for (const SlotState& slot : state.slots) {
            const std::span<float> target = slot_data(slot.name, static_cast<std::size_t>(slot.variable));
            std::copy(slot.values.begin(), slot.values.end(), target.begin());
        }
    } else if (built()) { // saved before the first step: slots as a fresh optimizer has them
        for (const Slot& slot : slots()) {
            const std::span<float> target = slot_data(slot.name, slot.variable);
            std::fill(target.begin(), target.end(), 0.0f);
        }
    }
    set_iterations(state.iterations);
    for (const StateValue& v : state.values) set_learning_rate(float(std::get<double>(v.value)));
}

} // namespace mixprec::optim
