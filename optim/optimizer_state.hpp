#pragma once
/// OptimizerState: everything an optimizer keeps, detached from it — what Optimizer::state() returns,
/// Optimizer::load_state() puts back and checkpoints store, whatever the optimizer is.
///
/// Besides the slots (one float32 array per slot and variable) and the applied-step count, an optimizer
/// may keep named numbers of its own, as Keras's optimizers keep non-slot variables: a constant learning
/// rate is kept as "learning_rate" (so a rate a callback lowered, as ReduceLROnPlateau does, survives a
/// checkpoint; a schedule is a function of the step count and is not saved), and an
/// amp::LossScaleOptimizer keeps its scale, counters and loss-scaling options as "loss_scale/…" values.
/// Integers and reals stay apart so that every value survives a round trip exactly (a float32 is held
/// as the double of the same value).

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace mixprec::optim {

/// The name of the constant learning rate among an optimizer's values.
inline constexpr const char* learning_rate_value = "learning_rate";

/// One named number of an optimizer's state.
struct StateValue {
    using Value = std::variant<std::int64_t, double>;
    std::string name; ///< "loss_scale/scale", ...
    Value value;
    friend bool operator==(const StateValue&, const StateValue&) = default;
};

/// The values of one slot of one variable.
struct SlotState {
    std::string name;           ///< "momentum", "m", "v", "v_max"
    std::uint64_t variable = 0; ///< position of the slot's variable: in Optimizer::slot_variables() for
                                ///< Optimizer::state(), in the list given to state(variables) and load_state
    std::vector<float> values;
    friend bool operator==(const SlotState&, const SlotState&) = default;
};

struct OptimizerState {
    std::string kind;               ///< Optimizer::kind(): "sgd", "loss_scale(adam)", ...
    std::int64_t iterations = 0;    ///< applied steps (the learning-rate schedule's position)
    bool built = false;             ///< false: no step was taken and no slot exists yet
    std::vector<SlotState> slots;   ///< every slot of every variable that has slots, in Optimizer::slots() order
    std::vector<StateValue> values; ///< the optimizer's own named numbers, in the order it gives them
    friend bool operator==(const OptimizerState&, const OptimizerState&) = default;
};

} // namespace mixprec::optim
