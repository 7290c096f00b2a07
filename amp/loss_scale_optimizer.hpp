#pragma once
/// LossScaleOptimizer: wraps any optimizer with dynamic loss scaling, as Keras's does.
///
///   LossScaleOptimizer opt{std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3})};
///   GradientTape tape;
///   Tensor loss = ...;                                        // float32
///   auto grads = tape.gradient(opt.scale_loss(loss), vars);   // float16, scaled by S
///   bool applied = opt.apply(grads, vars);                    // false: skipped, S backed off
///
/// apply() makes one pass over each gradient that widens it to float32, multiplies by 1/S, checks every
/// element is finite and adds up the squared norm. If all are finite, the inner optimizer applies the
/// unscaled float32 gradients to the float32 masters (its clipping sees unscaled gradients) and the
/// variables' working copies follow. If any is not, nothing changes — masters, working copies, the inner
/// optimizer's slots, its iteration count and so its learning-rate schedule — except the loss-scale
/// state, which records the overflow. Either way the scale then moves by the rule (loss_scale.hpp).
///
/// Gradient accumulation, for custom loops: accumulate() adds one micro-batch's (scaled) gradients into
/// float32 sums; apply_accumulated() unscales the sums once and steps as apply() does. An inf or NaN in
/// any micro-batch survives the sum and skips the step. The sums are sums: for Keras's mean (what
/// models::fit's accumulate_steps does), divide each micro-batch's loss by their number. The pending sums
/// are not part of state(), so a checkpoint saved between accumulate() and apply_accumulated() does not
/// hold them: save after apply_accumulated().
///
/// Per-layer loss scaling (made with LayerScaleOptions; amp/layer_scales.hpp has the rule): the loss is
/// scaled by the LayerScales' S instead of the global scale, each gradient is unscaled by its own layer's
/// scale, and after each step (applied or skipped) the scales move by the per-layer rule while the global
/// LossScale stays as it is. A training step must pass layer_scaling() to the layers of a chain
/// (models::CallContext::layer_scaling, which fit does) and hand it the tape (observe) before apply.
///
/// Data-parallel training (set_communicator): apply() sums the ranks' scaled gradients in buckets and
/// unscales the sums divided by the number of ranks in the checking pass (amp/gradient_exchange.hpp has
/// the numerics of each transport), so every rank finds the same finiteness, norm and step; an inf on one
/// rank skips the step on all. Per-layer scales and FP8 amaxes are agreed across ranks before they move
/// (LayerScales::agree, Fp8Scaling::agree), so the whole state stays identical on every rank.
///
/// FP8 products (scale_fp8): the optimizer keeps the per-tensor scales of the model's FP8 products
/// (amp/fp8_scaling.hpp). A training step hands fp8_scales() to the layers (models::CallContext::fp8,
/// which fit does), and after each step, applied or skipped, the delayed recipe chooses the next scales.

#include <mixprec/amp/fp8_scaling.hpp>
#include <mixprec/amp/gradient_exchange.hpp>
#include <mixprec/amp/layer_scales.hpp>
#include <mixprec/amp/loss_scale.hpp>
#include <mixprec/optim/optimizer.hpp>

#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace mixprec::amp {

/// What a LossScaleOptimizer keeps besides its inner optimizer.
struct LossScaleSnapshot {
    LossScaleOptions options;
    LossScaleState state;
    std::int64_t skipped_steps = 0;
    bool last_step_skipped = false;
    double last_gradient_norm = 0;
};

/// The names of a LossScaleOptimizer's values in an optim::OptimizerState begin with this.
inline constexpr std::string_view loss_scale_prefix = "loss_scale/";

/// `snapshot` as named values of an optim::OptimizerState: "loss_scale/<field>" for every field of the
/// options, the state and the counters (amp/loss_scale_values.cpp lists them). Integers, flags and
/// enums are integer values; float32 and double fields are real values, exactly.
std::vector<optim::StateValue> loss_scale_values(const LossScaleSnapshot& snapshot);

/// Reads back what loss_scale_values gave, checking it as a LossScale does: std::invalid_argument naming
/// the value that is missing, repeated, unknown, of the wrong kind (integer or real), not a float32 where
/// one is kept, or invalid (an unknown rule, an option out of range, a scale that is not finite and
/// positive, a negative counter).
LossScaleSnapshot loss_scale_snapshot(std::span<const optim::StateValue> values);

class LossScaleOptimizer final : public optim::Optimizer {
  public:
    explicit LossScaleOptimizer(std::unique_ptr<optim::Optimizer> inner, LossScaleOptions options = {});
    /// With per-layer loss scaling, starting from S = options.initial_scale (a power of two, else
    /// std::invalid_argument).
    LossScaleOptimizer(std::unique_ptr<optim::Optimizer> inner, LossScaleOptions options, LayerScaleOptions per_layer);

    /// loss · S, recorded on the tape (a scale op), in the loss's dtype.
    autodiff::Tensor scale_loss(const autodiff::Tensor& loss) const override;

    /// One loss-scaled step; returns whether it was applied (see the file comment).
    bool apply(const std::vector<autodiff::Tensor>& grads, const std::vector<autodiff::Variable>& variables) override;
    /// The same for float32 gradients that are still scaled by S (unscaled here, in place).
    bool apply_float32(std::vector<std::vector<float>>& grads,
                       const std::vector<autodiff::Variable>& variables) override;

    /// Adds one micro-batch's scaled gradients to the float32 sums.
    void accumulate(const std::vector<autodiff::Tensor>& grads);
    /// Steps with the accumulated sums (as apply_float32), then clears them. Returns whether it applied.
    bool apply_accumulated(const std::vector<autodiff::Variable>& variables);
    std::size_t accumulated_micro_batches() const { return micro_batches_; }

    // The inner optimizer's hyper-parameters and state, read through.
    std::int64_t iterations() const override { return inner_->iterations(); }
    float current_learning_rate() const override { return inner_->current_learning_rate(); }
    const optim::LearningRate& learning_rate() const override { return inner_->learning_rate(); }
    void set_learning_rate(optim::LearningRate lr) override { inner_->set_learning_rate(std::move(lr)); }
    std::vector<Slot> slots() const override { return inner_->slots(); }
    std::vector<autodiff::Variable> slot_variables() const override { return inner_->slot_variables(); }
    std::string kind() const override { return "loss_scale(" + inner_->kind() + ")"; }
    void build(const std::vector<autodiff::Variable>& variables) override { inner_->build(variables); }
    bool built() const override { return inner_->built(); }
    std::span<float> slot_data(std::string_view name, std::size_t variable) override {
        return inner_->slot_data(name, variable);
    }
    void set_iterations(std::int64_t iterations) override { inner_->set_iterations(iterations); }

    /// state() is the inner optimizer's state under this kind, with these values after its values:
    /// loss_scale_values(snapshot()), then the per-layer and FP8 scales if kept.
    std::vector<optim::StateValue> state_values() const override;
    /// Checks the "loss_scale/…" values (loss_scale_snapshot), lets the inner optimizer load the rest
    /// (Optimizer::load_state), then takes the options, state and counters: all or nothing.
    void load_state(const optim::OptimizerState& state, const std::vector<autodiff::Variable>& variables) override;
    /// The loss scaler's options and state and this optimizer's counters.
    LossScaleSnapshot snapshot() const;

    optim::Optimizer& inner() { return *inner_; }
    const optim::Optimizer& inner() const { return *inner_; }
    LossScale& loss_scale() { return scale_; }
    const LossScale& loss_scale() const { return scale_; }

    // Telemetry.
    float scale() const { return layers_ ? layers_->loss_scale() : scale_.scale(); }
    float current_loss_scale() const override { return scale(); }
    bool last_step_skipped() const { return last_skipped_; }
    std::int64_t skipped_steps() const override { return skipped_; }
    std::int64_t overflow_count() const { return skipped_; } ///< steps whose gradients had inf or NaN
    std::int64_t growth_count() const { return scale_.growth_count(); }
    std::int64_t backoff_count() const { return scale_.backoff_count(); }
    /// Global L2 norm of the last step's unscaled gradients (before clipping); inf if it overflowed.
    double last_gradient_norm() const override { return last_norm_; }
    /// The per-layer scales, or null without per-layer scaling.
    optim::LayerScaling* layer_scaling() override { return layers_ ? &*layers_ : nullptr; }
    const LayerScales* layer_scales() const { return layers_ ? &*layers_ : nullptr; }
    /// From now on, keeps the scales of FP8 products with these options (fresh state). load_state then
    /// takes the scales and histories of a state saved with the same options, and refuses others.
    void scale_fp8(Fp8ScalingOptions options) { fp8_.emplace(options); }
    /// The scales of FP8 products, or null unless scale_fp8 was called.
    autodiff::Fp8Scales* fp8_scales() override { return fp8_ ? &*fp8_ : nullptr; }
    const Fp8Scaling* fp8_scaling() const { return fp8_ ? &*fp8_ : nullptr; }
    /// From now on, averages gradients over the ranks of `communicator` before every step (null: one
    /// process again). Every rank must make this optimizer alike and call apply in step with the others.
    void set_communicator(std::shared_ptr<optim::Communicator> communicator, DataParallelOptions options = {});
    optim::Communicator* communicator() const override { return exchange_ ? &exchange_->communicator() : nullptr; }
    /// The reduction of data-parallel steps (null without a communicator): its bytes per step.
    const GradientExchange* gradient_exchange() const { return exchange_ ? &*exchange_ : nullptr; }
    /// Restores the counters kept here (checkpoints).
    void set_counters(std::int64_t skipped_steps, bool last_step_skipped, double last_gradient_norm);

  private:
    bool finish(bool finite, double squared_norm, std::vector<std::vector<float>>& grads,
                const std::vector<autodiff::Variable>& variables);
    /// 1 / the scale the gradient of `variable` carries.
    float inverse_scale(const autodiff::Variable& variable) const;
    /// Whether gradients are summed across more than one rank.
    bool distributed() const { return exchange_ && exchange_->communicator().size() > 1; }
    std::span<const float> inverse_scales(const std::vector<autodiff::Variable>& variables);

    std::unique_ptr<optim::Optimizer> inner_;
    LossScale scale_;
    std::optional<LayerScales> layers_;
    std::optional<Fp8Scaling> fp8_;
    std::optional<GradientExchange> exchange_;
    std::vector<float> inverse_scales_; // per gradient, for exchange_
    bool last_skipped_ = false;
    std::int64_t skipped_ = 0;
    double last_norm_ = 0;
    std::vector<std::vector<float>> buffers_;     // unscaled float32 gradients, reused between steps
    std::vector<std::vector<float>> accumulated_; // micro-batch sums (scaled)
    std::size_t micro_batches_ = 0;
};

} // namespace mixprec::amp
