// Optimizer::state and Optimizer::load_state: an optimizer's slots and step count, detached and put back.

#include <mixprec/optim/optimizer.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <unordered_map>
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

/// Renumbers `slots` (positions in `own`, an optimizer's slot_variables()) to positions in `variables`.
/// std::invalid_argument beginning with `who` for a slot's variable that `variables` lacks.
void renumber(std::vector<SlotState>& slots, const std::vector<Variable>& own, const std::vector<Variable>& variables,
              const std::string& who) {
    std::unordered_map<std::uint64_t, std::uint64_t> where;
    for (std::size_t i = 0; i < variables.size(); ++i) where.emplace(variables[i].uid(), i);
    for (SlotState& slot : slots) {
        if (slot.variable >= own.size())
            throw std::invalid_argument(who + slot_text({slot.name, slot.variable}) + ", but slot_variables() lists " +
                                        std::to_string(own.size()) + " variables");
        const auto it = where.find(own[slot.variable].uid());
        if (it == where.end())
            throw std::invalid_argument(who + "the optimizer has slots for variable " +
                                        quoted(own[slot.variable].name()) + ", which is not among the " +
                                        std::to_string(variables.size()) + " variables given");
        slot.variable = it->second;
    }
}

/// Throws unless the optimizer's slots (renumbered to positions in `variables`) are exactly the state's
/// (names, variables, sizes).
void check_same_slots(const std::vector<SlotState>& current, const std::vector<SlotState>& saved,
                      const std::vector<Variable>& variables) {
    const auto named = [&](const SlotKey& key) { return " (variable " + quoted(variables[key.second].name()) + ")"; };
    std::map<SlotKey, std::size_t> have;
    for (const auto& s : current) have[{s.name, s.variable}] = s.values.size();
    std::map<SlotKey, std::size_t> want;
    for (const auto& s : saved) want[{s.name, s.variable}] = s.values.size();
    for (const auto& [key, size] : want) {
        const auto it = have.find(key);
        if (it == have.end()) fail("the state has " + slot_text(key) + ", the optimizer has not" + named(key));
        if (it->second != size)
            fail(slot_text(key) + " has " + std::to_string(size) + " values in the state, " +
                 std::to_string(it->second) + " in the optimizer");
    }
    for (const auto& [key, size] : have)
        if (!want.contains(key)) fail("the optimizer has " + slot_text(key) + ", the state has not" + named(key));
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
    std::unordered_map<std::uint64_t, std::uint64_t> position_of; // Variable::uid() → the position naming it
    for (const SlotState& slot : state.slots) {
        const SlotKey key{slot.name, slot.variable};
        if (!seen.emplace(key, true).second) fail(slot_text(key) + " appears twice");
        if (slot.variable >= variables.size())
            fail(slot_text(key) + ": there are " + std::to_string(variables.size()) + " variables");
        const Variable& v = variables[slot.variable];
        if (slot.values.size() != v.value().size())
            fail(slot_text(key) + " has " + std::to_string(slot.values.size()) + " values, variable " +
                 quoted(v.name()) + " " + std::to_string(v.value().size()));
        const auto [it, first] = position_of.emplace(v.uid(), slot.variable);
        if (!first && it->second != slot.variable)
            fail("variables " + std::to_string(it->second) + " and " + std::to_string(slot.variable) +
                 " are the same variable " + quoted(v.name()) + ", and the state has slots for both");
    }
}

/// The variables the state's slots name, in the order it first names them.
std::vector<Variable> named_variables(const OptimizerState& state, const std::vector<Variable>& variables) {
    std::vector<Variable> named;
    std::vector<bool> taken(variables.size(), false); // check() has bounded every position
    for (const SlotState& slot : state.slots)
        if (!taken[slot.variable]) {
            taken[slot.variable] = true;
            named.push_back(variables[slot.variable]);
        }
    return named;
}

} // namespace

OptimizerState Optimizer::state() const {
    OptimizerState s;
    s.kind = kind();
    s.iterations = iterations();
    s.built = built();
    for (const Slot& slot : slots())
        s.slots.push_back({slot.name, slot.variable, std::vector<float>(slot.values.begin(), slot.values.end())});
    s.values = state_values();
    return s;
}

std::vector<StateValue> Optimizer::state_values() const {
    std::vector<StateValue> values;
    if (!learning_rate().schedule()) values.push_back({learning_rate_value, double(learning_rate().at(0))});
    return values;
}

OptimizerState Optimizer::state(const std::vector<Variable>& variables) const {
    OptimizerState s = state();
    renumber(s.slots, slot_variables(), variables, "Optimizer::state: ");
    return s;
}

void Optimizer::load_state(const OptimizerState& state, const std::vector<Variable>& variables) {
    check(*this, state, variables);
    const std::vector<Variable> named = named_variables(state, variables);
    const auto current_slots = [&] {
        OptimizerState mine = this->state();
        renumber(mine.slots, slot_variables(), variables, "load_state: ");
        return mine.slots;
    };
    if (built() && state.built) check_same_slots(current_slots(), state.slots, variables);
    // Everything checked: now change things. Building is the one step that can still fail.
    if (state.built) {
        if (!built()) {
            try {
                build(named);
            } catch (const std::invalid_argument& e) {
                fail(std::string("cannot build the optimizer: ") + e.what());
            }
            check_same_slots(current_slots(), state.slots, variables); // the one check that needs a built optimizer
        }
        std::unordered_map<std::uint64_t, std::size_t> position; // Variable::uid() → position in slot_variables()
        const std::vector<Variable> own = slot_variables();
        for (std::size_t i = 0; i < own.size(); ++i) position.emplace(own[i].uid(), i);
        for (const SlotState& slot : state.slots) {
            const Variable& v = variables[static_cast<std::size_t>(slot.variable)];
            const std::span<float> target = slot_data(slot.name, position.at(v.uid()));
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
