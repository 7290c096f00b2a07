#pragma once
/// Per-tensor FP8 scaling: the scale s each FP8 tensor is multiplied by before it is cast,
/// q = fp8(x · s) (autodiff/ops_fp8.hpp). Two recipes, as Transformer Engine names them:
///
/// **current** (TE's Float8CurrentScaling, torchao's tensorwise float8): s comes from the tensor's own
/// amax, as it is cast:
///
///   amax                              s
///   0, infinite or NaN                1
///   otherwise                         fp8_max / max(amax, epsilon)        (float32 division)
///   (s infinite: float32's largest finite; with power_of_two: s rounded down to a power of two,
///    its mantissa bits cleared, so that scaling changes no digit)
///
/// **delayed** (TE's DelayedScaling): s comes from the amaxes of earlier steps. Each tensor keeps the
/// amax of its last `history_length` steps (a tensor cast several times in one step keeps the largest);
/// the step uses the scale chosen after the step before, and end_step() chooses the next:
///
///   a = the largest amax of the history (amax_compute::max) or this step's (most_recent)
///   s = fp8_max / a / 2^margin        if a is finite and > 0; otherwise s stays as it was
///   (s infinite: float32's largest finite; with power_of_two as above)
///
/// A tensor starts with s = 1 and an empty history (TE's initial scale and zeroed history). A tensor
/// that was not cast in a step (a layer not called) neither records nor moves its history. fp8_max is
/// the format's largest finite: 448 for float8_e4m3, 57344 for float8_e5m2.
///
/// Tensors are named "<layer>/input", "<layer>/kernel" and "<layer>/output_grad".
///
/// With stochastic_gradients, output gradients are rounded stochastically into their format
/// (stochastic_rounding.hpp) instead of to nearest even. The random stream of a cast is fixed by the seed,
/// the number of steps finished, the tensor's name and how often the layer was called before in this
/// step, so a run resumed from a checkpoint draws what the uninterrupted run draws:
///
///   key = counter_bits(counter_bits(counter_bits(seed, steps), fnv1a64(name)), call)

#include <mixprec/autodiff/ops_fp8.hpp>
#include <mixprec/optim/communicator.hpp>
#include <mixprec/optim/optimizer_state.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::amp {

/// The names of Fp8Scaling values in an optim::OptimizerState begin with this.
inline constexpr std::string_view fp8_prefix = "fp8/";

enum class Fp8Recipe : std::uint8_t { delayed, current };
enum class AmaxCompute : std::uint8_t { max, most_recent };

struct Fp8ScalingOptions {
    Fp8Recipe recipe = Fp8Recipe::delayed;
    std::int64_t history_length = 16;                       ///< delayed: steps of amax kept (1 ... 1024)
    AmaxCompute amax_compute = AmaxCompute::max;            ///< delayed
    int margin = 0;                                         ///< delayed: doublings of headroom below fp8_max (0 ... 32)
    float epsilon = 0.0f;                                   ///< current: amax is taken as at least this (≥ 0)
    bool power_of_two = false;                              ///< round every scale down to a power of two
    autodiff::Dtype forward = autodiff::Dtype::float8_e4m3; ///< inputs and kernels
    autodiff::Dtype backward = autodiff::Dtype::float8_e5m2; ///< output gradients
    /// false: output gradients are cast with scale 1, not scaled per tensor, and a dynamic loss scale alone
    /// places them in e5m2's range, as Mellempudi et al. 2019 train (with LossScaleOptions'
    /// min_scale_schedule, their enhanced loss scaling). Their casts do not saturate: an overflow becomes
    /// infinity, so the loss scale sees it, skips the step and backs off. Inputs and kernels are scaled
    /// (and saturate) either way.
    bool scale_gradients = true;
    /// Round output gradients stochastically (see above), drawing from streams derived from `seed`
    /// (which only stochastic rounding uses: without it, the constructor sets it to 0).
    bool stochastic_gradients = false;
    std::uint64_t seed = 0;
    friend bool operator==(const Fp8ScalingOptions&, const Fp8ScalingOptions&) = default;
};

/// The largest finite of an FP8 format; std::invalid_argument for any other dtype.
float fp8_max(autodiff::Dtype format);

/// The scaling state of every FP8 tensor of a model, by name.
class Fp8Scaling final : public autodiff::Fp8Scales {
  public:
    /// std::invalid_argument naming an option out of range.
    explicit Fp8Scaling(Fp8ScalingOptions options = {});

    /// The casts of a dense layer's input, kernel and output gradient. They refer to this object,
    /// which must outlive the step that uses them.
    autodiff::Fp8DenseCasts dense_casts(const std::string& layer) override;

    /// The scale for a cast of tensor `name` into `format`, given its amax now (see the table).
    float scale_for(const std::string& name, autodiff::Dtype format, float amax);
    /// Counts the step. Delayed: also records each tensor's step, chooses its next scale and moves its
    /// history on.
    void end_step();
    /// Data-parallel training, before end_step(): every tensor's amax of this step becomes the largest of
    /// all ranks (Transformer Engine reduces amaxes across the data-parallel group the same way), so that
    /// the delayed recipe chooses the same scales everywhere. Nothing to agree on for the current recipe.
    void agree(optim::Communicator& communicator);
    /// The steps finished (end_step calls): what keys the random streams of stochastic rounding.
    std::uint64_t steps() const { return steps_; }

    struct Tensor {
        autodiff::Dtype format = autodiff::Dtype::float8_e4m3;
        float scale = 1.0f;
        std::vector<float> history{}; ///< oldest first, at most history_length amaxes of finished steps
        float step_amax = 0.0f;       ///< the largest amax of this step so far
        bool cast_this_step = false;
        friend bool operator==(const Tensor&, const Tensor&) = default;
    };
    const std::map<std::string, Tensor>& tensors() const { return tensors_; }
    const Fp8ScalingOptions& options() const { return options_; }

    /// The options, the step count, and every tensor's format, scale and history, as "fp8/…" values of an
    /// optimizer's state, and back (amp/fp8_scaling_values.cpp). Saved between steps: what a step has cast
    /// so far is not kept. Values newer than a saved state read as their defaults. from_values: std::invalid_argument naming a value that is missing, repeated, unknown, of
    /// the wrong kind or out of range (at most max_tensors tensors; a history no longer than
    /// history_length, of finite amaxes ≥ 0; scales finite and > 0).
    std::vector<optim::StateValue> values() const;
    static Fp8Scaling from_values(std::span<const optim::StateValue> values);
    static constexpr std::size_t max_tensors = 3 * 4096;

  private:
    float scale_from(float amax, autodiff::Dtype format, int margin) const;

    Fp8ScalingOptions options_;
    std::map<std::string, Tensor> tensors_;
    std::uint64_t steps_ = 0;
    std::map<std::string, std::uint64_t> calls_; ///< stochastic: dense_casts calls of each layer in this step
};

} // namespace mixprec::amp
