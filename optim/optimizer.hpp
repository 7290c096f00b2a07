#pragma once
/// Optimizer: the interface of SGD, Adam and AdamW, in Keras's shape: `apply(grads, variables)`.
///
/// One applied step: widen every gradient to float32 → clip (optional) → lr = schedule(iterations)
/// → update each float32 master in place → mark the variables changed (their working copies are
/// re-rounded on the next read) → iterations += 1.
///
/// Per-variable state ("slots") belongs to each variable, as PyTorch keeps state per parameter: a call
/// may pass any list of distinct variables, so that frozen layers (Variable::set_trainable(false), which
/// takes their variables out of trainable_variables()) can leave it and come back. A variable seen for
/// the first time gets zero slots; one left out of a call keeps its slots untouched (a frozen layer's Adam
/// moments survive until it is unfrozen). slot_variables() lists the variables that have slots, in the
/// order first seen: the slot positions of slots(), slot_data() and state() index it.
///
/// The step count is the optimizer's, as in Keras: every variable of a call is updated with that step's
/// learning rate and (Adam) bias correction, whether it took part in the earlier steps or not. (PyTorch
/// counts steps per parameter instead; the two agree while the list of variables does not change.)
///
/// Non-finite gradients are not checked here: an inf/NaN goes into the weights and slots. Skipping such
/// steps is the job of amp::LossScaleOptimizer, which checks before calling apply_float32.

#include <mixprec/optim/communicator.hpp>
#include <mixprec/optim/optimizer_state.hpp>
#include <mixprec/optim/schedule.hpp>

#include <mixprec/autodiff/tensor/tensor.hpp>
#include <mixprec/autodiff/variable.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mixprec::autodiff {
class GradientTape;
class Fp8Scales;
} // namespace mixprec::autodiff

namespace mixprec::optim {

using autodiff::Tensor;
using autodiff::Variable;

/// Gradient clipping, Keras semantics; at most one is set, each finite and > 0.
struct Clipping {
    std::optional<float> clipnorm{};        ///< per tensor:  g ← g · c / max(‖g‖, c)
    std::optional<float> global_clipnorm{}; ///< all tensors: g ← g · c / max(‖(g₁ … gₙ)‖, c)
    std::optional<float> clipvalue{};       ///< per element: g ← clamp(g, -c, c)
};

/// Throws std::invalid_argument naming the option unless `clip` is valid.
void validate(const Clipping& clip);
/// Clips `grads` in place as `clip` says (norms are summed in double).
void clip_gradients(const Clipping& clip, std::vector<std::vector<float>>& grads);

/// Gradient accumulation's sum: adds each gradient, widened exactly to float32, into `sums` (one vector per
/// variable; empty `sums` start at zero). std::invalid_argument, prefixed by `who`, when the number of
/// gradients or a gradient's size differs from the earlier ones.
void accumulate_float32(std::vector<std::vector<float>>& sums, const std::vector<Tensor>& grads, std::string_view who);

/// Per-layer loss scaling as a training step sees it (amp::LossScaleOptimizer implements it when made with
/// per-layer scaling; see amp/layer_scales.hpp): the layers of a chain multiply the gradient flowing back
/// into their outputs by factor(layer), and after the backward pass the step hands over the tape, whose
/// telemetry says what each layer's backward pass rounded.
class LayerScaling {
  public:
    virtual ~LayerScaling() = default;
    /// The power of two the gradient of `layer`'s output is multiplied by on its way back (1 if unknown).
    virtual float factor(const std::string& layer) const = 0;
    /// After gradient() on a tape made with telemetry, before apply(): the step's layers and statistics.
    virtual void observe(const autodiff::GradientTape& tape) = 0;
};

/// The public members are virtual so that a decorator (amp::LossScaleOptimizer) can forward them.
/// The interface every optimizer offers (SGD, Adam, AdamW, amp::LossScaleOptimizer, a user's own).
class Optimizer {
  public:
    virtual ~Optimizer() = default;
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    /// Widens each gradient (any dtype, exactly) to float32 and calls apply_float32. Gradient i must
    /// have the shape of variable i (std::invalid_argument otherwise). Returns whether the step applied.
    virtual bool apply(const std::vector<Tensor>& grads, const std::vector<Variable>& variables);

    /// One step on float32 gradients (one vector per variable, row-major), which clipping may modify.
    /// `variables` are any distinct variables (see the file comment). Validates everything before changing
    /// anything (std::invalid_argument): counts and sizes (naming the variable and both sizes), a variable
    /// passed twice.
    virtual bool apply_float32(std::vector<std::vector<float>>& grads, const std::vector<Variable>& variables) = 0;

    /// Number of applied steps.
    virtual std::int64_t iterations() const = 0;
    /// The learning rate the next step will use.
    virtual float current_learning_rate() const = 0;
    virtual const LearningRate& learning_rate() const = 0;
    virtual void set_learning_rate(LearningRate lr) = 0;

    /// "sgd", "adam", "adamw", ...
    virtual std::string kind() const = 0;

    // Loss scaling, seen through any optimizer (the seams of Keras 3's base optimizer), so that a training
    // loop, its callbacks and checkpoints never need to know whether the optimizer scales. One that does
    // not (SGD, Adam, AdamW) multiplies by 1, skips nothing and measures no norm; amp::LossScaleOptimizer
    // overrides all four.

    /// The loss to differentiate: loss · S, recorded on the tape (here: `loss` itself).
    virtual Tensor scale_loss(const Tensor& loss) const { return loss; }
    /// S, the factor scale_loss applies now (here: 1).
    virtual float current_loss_scale() const { return 1.0f; }
    /// Steps not applied because a gradient had an inf or NaN (here: 0).
    virtual std::int64_t skipped_steps() const { return 0; }
    /// Global L2 norm of the last step's unscaled gradients, before clipping (here: NaN, not measured).
    virtual double last_gradient_norm() const { return std::numeric_limits<double>::quiet_NaN(); }
    /// Per-layer loss scaling, if this optimizer does it (here: null).
    virtual LayerScaling* layer_scaling() { return nullptr; }
    /// The scales of FP8 products, if this optimizer keeps them (here: null; amp/fp8_scaling.hpp).
    virtual autodiff::Fp8Scales* fp8_scales() { return nullptr; }
    /// The ranks this optimizer averages gradients over in data-parallel training (optim/communicator.hpp),
    /// or null for one process (here: null; amp::LossScaleOptimizer::set_communicator gives it one). fit
    /// splits each batch among the same ranks.
    virtual Communicator* communicator() const { return nullptr; }

    /// Everything this optimizer keeps, detached from it: kind, iterations, slots and named values (a
    /// constant learning rate as "learning_rate"; an amp::LossScaleOptimizer adds its scale, counters and
    /// options). Each SlotState::variable is a position in slot_variables().
    virtual OptimizerState state() const;
    /// The named values of state() alone, without copying the slots (a LossScaleOptimizer adds its own).
    virtual std::vector<StateValue> state_values() const;
    /// The same with each SlotState::variable the position in `variables` of the slot's variable: what
    /// checkpoints save (with all the model's variables) and load_state(state, variables) takes back.
    /// std::invalid_argument naming the variable when this optimizer has slots for one that is not in
    /// `variables`. (Not virtual: it renumbers state(). A subclass that overrides state() brings this
    /// overload back with `using Optimizer::state;`.)
    OptimizerState state(const std::vector<Variable>& variables) const;

    /// Puts `state` (from state(variables) of an optimizer of the same kind, or state() with `variables`
    /// its slot_variables()) back: each SlotState::variable is a position in `variables`. The slots are
    /// those of exactly the variables the state's slots name (a subset of `variables` when some were
    /// frozen while training), in the order the state names them; the values go into each variable's slots
    /// by identity. Checks first, changing nothing on failure: the kinds must be equal, every slot must
    /// name a variable of the right size (two positions of one variable are refused), an optimizer built
    /// already must have slots for exactly the variables the state names and match its slots one for one,
    /// and every value must be one this optimizer keeps. An optimizer that is not built yet is built first
    /// (with zero slots for those variables); if its slots then differ from the state's (the same kind
    /// with other options: SGD with and without momentum), the load fails and leaves it built with zero
    /// slots and its old iteration count, which behaves exactly as the unbuilt one. A state without slots
    /// (an SGD without momentum, or an optimizer only ever applied to an empty list) names no variable: it
    /// fits an optimizer of its kind that has no slots yet, whose variables then get zero slots as they
    /// come. A state saved before the first step leaves a built optimizer with zero slots. A learning rate
    /// in the state replaces this optimizer's constant rate (refused when this optimizer follows a
    /// schedule); a state without one (saved under a schedule, or by mixprec before 0.3) leaves the rate
    /// as it is. std::invalid_argument naming both sides of any mismatch.
    virtual void load_state(const OptimizerState& state, const std::vector<Variable>& variables);

    /// One slot of one variable, read-only (tests, checkpoints). Empty before the first step.
    struct Slot {
        std::string name;              ///< "momentum", "m", "v", "v_max"
        std::size_t variable;          ///< position in slot_variables()
        std::span<const float> values; // (variable's elements)
    };
    /// Every slot, slot name by slot name, each in slot_variables() order.
    virtual std::vector<Slot> slots() const = 0;
    /// The variables this optimizer has seen (and, if it keeps slots, has slots for), in the order first
    /// seen: Slot::variable and slot_data's `variable` are positions in it. Empty before the first step.
    /// The optimizer holds these handles: a variable lives as long as the optimizer that has seen it.
    virtual std::vector<Variable> slot_variables() const = 0;

    /// Marks the optimizer built and creates zero slots for those of `variables` it has not seen, checking
    /// the others as apply does (nothing changes if a check fails), so that slot_data and set_iterations
    /// can then set a state (load_state does).
    virtual void build(const std::vector<Variable>& variables) = 0;
    virtual bool built() const = 0;
    /// Writable values of slot `name` of the variable at position `variable` of slot_variables()
    /// (std::invalid_argument if unknown).
    virtual std::span<float> slot_data(std::string_view name, std::size_t variable) = 0;
    virtual void set_iterations(std::int64_t iterations) = 0;

  protected:
    Optimizer() = default;

  private:
    std::vector<std::vector<float>> widened_; ///< apply's float32 gradients, reused from step to step
};

/// The common machinery of SGD, Adam and AdamW: learning rate, clipping, the applied-step count and
/// per-variable slots (a hash map from Variable::uid() to the slot position, so a step costs one lookup
/// per variable). A subclass names its slots and updates one variable.
class SlotOptimizer : public Optimizer {
  public:
    bool apply_float32(std::vector<std::vector<float>>& grads, const std::vector<Variable>& variables) override;
    std::int64_t iterations() const override { return iterations_; }
    float current_learning_rate() const override { return learning_rate_.at(iterations_); }
    const LearningRate& learning_rate() const override { return learning_rate_; }
    void set_learning_rate(LearningRate lr) override { learning_rate_ = std::move(lr); }
    const Clipping& clipping() const { return clip_; }
    std::vector<Slot> slots() const override;
    std::vector<Variable> slot_variables() const override { return variables_; }
    void build(const std::vector<Variable>& variables) override;
    bool built() const override { return built_; }
    std::span<float> slot_data(std::string_view name, std::size_t variable) override;
    void set_iterations(std::int64_t iterations) override;

  protected:
    SlotOptimizer(LearningRate learning_rate, Clipping clip);

    /// The slot names of this optimizer, fixed for its lifetime.
    virtual std::vector<std::string> slot_names() const = 0;
    /// Updates in place the variable at position `index` of slot_variables(). `step` is 1-based (1 on
    /// the optimizer's first applied step, whatever the variable's).
    virtual void update(std::size_t index, std::span<float> weights, std::span<const float> grad, float lr,
                        std::int64_t step) = 0;
    /// Slot number `slot` (position in slot_names()) of the variable at position `index`.
    std::span<float> slot(std::size_t slot, std::size_t index) { return slots_[slot][index]; }

  private:
    /// Sets positions_[i] to the slot position of variables[i], after checking them all (sizes, no
    /// variable twice) and only then adding zero slots for the unseen ones. `who` begins the messages.
    void place(const std::vector<Variable>& variables, const char* who);

    LearningRate learning_rate_;
    Clipping clip_;
    std::int64_t iterations_ = 0;
    bool built_ = false;
    std::vector<std::string> names_;                       // slot_names(), cached at build
    std::vector<Variable> variables_;                      // slot_variables(), in the order first seen
    std::unordered_map<std::uint64_t, std::size_t> index_; // Variable::uid() → position in variables_
    std::vector<std::vector<std::vector<float>>> slots_;   // [slot][position] (variable's elements)
    std::vector<std::size_t> positions_;                   // place(): the position of each variable of a call
    std::vector<std::uint64_t> last_call_;                 // per position: the last place() call naming it
    std::uint64_t calls_ = 0;                              // place() calls, to find a variable passed twice
};

} // namespace mixprec::optim
