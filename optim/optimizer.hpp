#pragma once
/// Optimizer: the interface of SGD, Adam and AdamW, in Keras's shape: `apply(grads, variables)`.
///
/// One applied step: widen every gradient to float32 → clip (optional) → lr = schedule(iterations)
/// → update each float32 master in place → mark the variables changed (their working copies are
/// re-rounded on the next read) → iterations += 1. Per-variable state ("slots") lives in vectors
/// aligned by position with the variables of the first call; every later call must pass the same
/// number of variables with the same element counts.
///
/// Non-finite gradients are not checked here: an inf/NaN goes into the weights and slots. Skipping such
/// steps is the job of amp::LossScaleOptimizer, which checks before calling apply_float32.

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
#include <vector>

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
    /// Validates everything before changing anything: counts and sizes (std::invalid_argument naming
    /// the variable and both sizes), and the variables against the slots built by the first call.
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

    /// Everything this optimizer keeps, detached from it: kind, iterations, slots and named values (a
    /// constant learning rate as "learning_rate"; an amp::LossScaleOptimizer adds its scale, counters and
    /// options). What checkpoints save.
    virtual OptimizerState state() const;

    /// Puts `state` (from state() of an optimizer of the same kind) back, for `variables` (those the
    /// optimizer is applied to, in the same order). Checks first, changing nothing on failure: the kinds
    /// must be equal, every slot must name a variable of the right size and, when this optimizer is built
    /// already, match its slots one for one; every value must be one this optimizer keeps. An optimizer
    /// that is not built yet is built first; if its slots then differ from the state's (the same kind
    /// with other options: SGD with and without momentum), the load fails and leaves it built with zero
    /// slots and its old iteration count, which behaves exactly as the unbuilt one. A state saved before
    /// the first step leaves a built optimizer with zero slots. A learning rate in the state replaces this
    /// optimizer's constant rate (refused when this optimizer follows a schedule); a state without one
    /// (saved under a schedule, or by mixprec before 0.3) leaves the rate as it is. std::invalid_argument
    /// naming both sides of any mismatch.
    virtual void load_state(const OptimizerState& state, const std::vector<Variable>& variables);

    /// One slot of one variable, read-only (tests, checkpoints). Empty before the first step.
    struct Slot {
        std::string name;              ///< "momentum", "m", "v", "v_max"
        std::size_t variable;          ///< position in the variables list
        std::span<const float> values; // (variable's elements)
    };
    virtual std::vector<Slot> slots() const = 0;

    /// Creates the zero slots for `variables` if not yet built (else checks them as apply does), so that
    /// slot_data and set_iterations can then set a state (load_state does).
    virtual void build(const std::vector<Variable>& variables) = 0;
    virtual bool built() const = 0;
    /// Writable values of slot `name` of variable `variable` (std::invalid_argument if unknown).
    virtual std::span<float> slot_data(std::string_view name, std::size_t variable) = 0;
    virtual void set_iterations(std::int64_t iterations) = 0;

  protected:
    Optimizer() = default;

  private:
    std::vector<std::vector<float>> widened_; ///< apply's float32 gradients, reused from step to step
};

/// The common machinery of SGD, Adam and AdamW: learning rate, clipping, the applied-step count and
/// per-variable slots aligned by position. A subclass names its slots and updates one variable.
class SlotOptimizer : public Optimizer {
  public:
    bool apply_float32(std::vector<std::vector<float>>& grads, const std::vector<Variable>& variables) override;
    std::int64_t iterations() const override { return iterations_; }
    float current_learning_rate() const override { return learning_rate_.at(iterations_); }
    const LearningRate& learning_rate() const override { return learning_rate_; }
    void set_learning_rate(LearningRate lr) override { learning_rate_ = std::move(lr); }
    const Clipping& clipping() const { return clip_; }
    std::vector<Slot> slots() const override;
    void build(const std::vector<Variable>& variables) override;
    bool built() const override { return built_; }
    std::span<float> slot_data(std::string_view name, std::size_t variable) override;
    void set_iterations(std::int64_t iterations) override;

  protected:
    SlotOptimizer(LearningRate learning_rate, Clipping clip);

    /// The slot names of this optimizer, fixed for its lifetime.
    virtual std::vector<std::string> slot_names() const = 0;
    /// Updates variable `index` in place. `step` is 1-based (1 on the first applied step).
    virtual void update(std::size_t index, std::span<float> weights, std::span<const float> grad, float lr,
                        std::int64_t step) = 0;
    /// Slot number `slot` (position in slot_names()) of variable `index`.
    std::span<float> slot(std::size_t slot, std::size_t index) { return slots_[slot][index]; }

  private:
    void check_or_build(const std::vector<Variable>& variables);

    LearningRate learning_rate_;
    Clipping clip_;
    std::int64_t iterations_ = 0;
    bool built_ = false;
    std::vector<std::string> names_;                     // slot_names(), cached at build
    std::vector<std::size_t> sizes_;                     // element count of each variable, fixed at build
    std::vector<std::vector<std::vector<float>>> slots_; // [slot][variable] (variable's elements)
};

} // namespace mixprec::optim
