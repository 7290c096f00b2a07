#pragma once
/// Per-layer loss scaling: a power of two per layer of a chain, chosen every step from what the layer's
/// backward pass rounded (rounding telemetry), so that each layer's gradients sit as high in the format's
/// range as is safe — one global scale must instead serve the layer with the largest gradients and the one
/// with the smallest at once. A variant of Zhao et al. 2019 ("Adaptive Loss Scaling for Mixed Precision
/// Training"), which picks each layer's scale from gradient statistics: here the statistic is the exact
/// largest magnitude each layer rounded, as Transformer Engine picks FP8 scales from amax.
///
/// Layers 1..L, input side first, each have a cumulative exponent E_l; the loss has E_loss. The loss is
/// multiplied by S = 2^E_loss, and the gradient flowing back into layer l's output by f_l = 2^(E_l − E_{l+1})
/// (E_{L+1} = E_loss), so everything layer l's backward pass computes — its weight gradients and the
/// gradient it passes down — carries the scale C_l = 2^E_l, and each weight gradient is unscaled by its own
/// layer's C_l. All scales are powers of two: scaling and unscaling change no digit, only the range.
///
/// The rule, after every step, for the loss and each layer g, from the step's statistics of everything g's
/// backward pass rounded (amp/telemetry.hpp's "<layer>/backward", "loss/backward"): amax_g, the largest
/// finite magnitude before rounding, and overflow_g, the values that rounded beyond the format. With
/// T = the least magnitude that overflows the gradients' format (65520 for float16) and safe = T / 2^margin:
///
///   condition                                     E_g becomes                                     n_g
///   overflow_g > 0 or amax_g ≥ safe               E_g − max(1, ⌈log2(amax_g / safe)⌉)  (back off)  0
///   n_g + 1 ≥ growth_interval and                 E_g + d, the largest d with amax_g · 2^d < safe  0
///     0 < amax_g < safe / 2^window                  (grow to the band's top at once)
///   otherwise (inside the band, or all zeros)     E_g                                             n_g + 1
///   the step was skipped but no g overflowed      every E_g − 1 (an inf or NaN from elsewhere)    0
///
/// each E clamped to [min_exponent, max_exponent]; n_g counts g's steps since it last moved, and a layer
/// seen for the first time may grow at once (its n starts at growth_interval), so the scales settle in
/// the first steps, and after a back-off a layer waits growth_interval steps before it grows again (one
/// skipped step per growth_interval at most from growing, however much a layer's gradients wander). An
/// overflow skips the step, as with one scale (the
/// LossScaleOptimizer checks every gradient), and backs off only the layers whose own roundings overflowed:
/// an inf that one layer produces flows on into the layers below as inf, which is not counted as their
/// overflow (it was not finite before rounding). A layer seen for the first time starts with the exponent of
/// the layer after it (f = 1). Exponents and counts are part of the optimizer's state, so checkpoints keep
/// them.
///
/// Needs a chain: a model whose layers each take the previous one's output (models::Sequential). Where two
/// paths meet (a residual sum) their scales would differ, so fit refuses other models.

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/dtype.hpp>
#include <mixprec/optim/communicator.hpp>
#include <mixprec/optim/optimizer.hpp>
#include <mixprec/optim/optimizer_state.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::amp {

struct LayerScaleOptions {
    int margin = 2;                    ///< doublings of headroom kept below overflow (≥ 0)
    int window = 2;                    ///< doublings of room a layer may have before it grows (≥ 1)
    std::int64_t growth_interval = 50; ///< steps a layer waits after it moved before it may grow (≥ 1)
    int min_exponent = -60;            ///< bounds of every E
    int max_exponent = 60;
};

/// The names of LayerScales values in an optim::OptimizerState begin with this.
inline constexpr std::string_view layer_scale_prefix = "layer_scale/";

class LayerScales final : public optim::LayerScaling {
  public:
    /// `initial_loss_exponent`: E_loss at the start (and of every layer until the rule moves it).
    /// std::invalid_argument for options out of range.
    explicit LayerScales(LayerScaleOptions options = {}, int initial_loss_exponent = 15);

    float factor(const std::string& layer) const override;
    void observe(const autodiff::GradientTape& tape) override;

    /// S = 2^E_loss, what the loss is multiplied by.
    float loss_scale() const;
    /// C of the layer that owns `variable` (named "<layer>/…"), or S for a variable of no known layer.
    float gradient_scale(const std::string& variable) const;
    /// Applies the rule to what observe() saw since the last update (see the table), then forgets it.
    /// `gradients` is the dtype the gradients were rounded to (float32: nothing can overflow; no change).
    void update(bool step_applied, autodiff::Dtype gradients);
    /// Data-parallel training, before update(): makes what observe() saw the same on every rank, as one
    /// process would have seen it — an overflow on any rank, and the largest amax of all ranks, for the
    /// loss and each layer (all the rule reads).
    void agree(optim::Communicator& communicator);

    struct Layer {
        std::string name;
        int exponent;             ///< E_l
        std::int64_t unmoved = 0; ///< n_l: steps since E_l last moved
        friend bool operator==(const Layer&, const Layer&) = default;
    };
    const std::vector<Layer>& layers() const { return layers_; } ///< input side first
    int loss_exponent() const { return loss_exponent_; }
    std::int64_t loss_unmoved() const { return loss_unmoved_; }
    const LayerScaleOptions& options() const { return options_; }

    /// Everything above as "layer_scale/…" values, and back (std::invalid_argument naming a missing,
    /// unknown, repeated or out-of-range value; at most max_layers layers).
    std::vector<optim::StateValue> values() const;
    static LayerScales from_values(std::span<const optim::StateValue> values);
    static constexpr std::size_t max_layers = 4096;

  private:
    struct Observed {
        autodiff::RoundingStats stats;
        bool seen = false;
    };
    int exponent_after(std::size_t layer) const;
    void step(int& exponent, std::int64_t& unmoved, const autodiff::RoundingStats& stats, float threshold) const;

    LayerScaleOptions options_;
    int loss_exponent_;
    std::int64_t loss_unmoved_;
    std::vector<Layer> layers_;
    Observed loss_observed_;
    std::vector<Observed> observed_; // by position in layers_
};

} // namespace mixprec::amp
