#pragma once
/// Dynamic loss scaling: the rule that moves the scale after each step, with presets that reproduce the
/// rules of the libraries people come from. One call per optimizer step: update(finite), where `finite`
/// says whether every gradient of the step was finite.
///
/// | rule      | on a finite step                                    | on an overflow                                        |
/// |-----------|-----------------------------------------------------|-------------------------------------------------------|
/// | mixprec   | c += 1; at c = N: s·g if finite and ≤ max; c = 0;   | c = 0; h -= 1; at h = 0: s = max(s·b, min)            |
/// |           | h = hysteresis (refilled on every finite step)      | (so `hysteresis` consecutive overflows back off once, |
/// |           |                                                     |  and each further one backs off again)               |
/// | keras     | at c = N-1: s·2, c = 0; else c += 1 (no cap)        | c = 0; s / 2 (no floor)                               |
/// | tf_keras  | at c+1 ≥ N: s·2 if finite, c = 0; else c += 1       | c = 0; s = max(s / 2, 1)                              |
/// | pytorch   | c += 1; at c = N: s·g if finite, c = 0              | s·b; c = 0 (no floor)                                 |
/// | deepspeed | grows when (i - last_overflow - 1) > 0 and is a      | if h = 1: s = max(s / 2, min) (raise at min if asked);|
/// |           | multiple of N ((N+1)-th clean step); h refilled on  | else h -= 1; last_overflow = i                        |
/// |           | growth (or every clean step: consecutive_hysteresis)| (i counts every step)                                 |
/// | megatron  | c += 1; at c = N: c = 0, h = hysteresis, s·g        | c = 0; h -= 1; at h ≤ 0: s = max(s·b, min)            |
/// | cerebras  | n += 1; n > N: s·2, n = o = 0                       | n += 1, o += 1; o/n > tolerance: s / 2, n = o = 0     |
/// |           | then s = clamp(s, min, max) after every step        |                                                       |
/// | ascend    | at good+1 ≥ N: s·g if s < 3.4e38/g, good = bad = 0; | at bad+1 ≥ decr_every_n: s = max(1, s·b),             |
/// |           | else good += 1 (bad is kept: cumulative)            | good = bad = 0; else bad += 1, good = 0               |
/// | mindspore | N steps since the last rescale: s·g (no cap), c = 0;| s = max(s · (1/g), 1); c = 0                          |
/// |           | else c += 1                                         | (one factor: backoff_factor must be 1/g)              |
///
/// (s scale, c growth counter, N growth_interval, g growth_factor, b backoff_factor, h hysteresis counter.)
/// A fixed scale (dynamic = false) never moves. With a min_scale_schedule (Mellempudi et al.'s enhanced
/// loss scaling), every rule's step is followed by s = max(s, floor(t)): t counts the updates so far and
/// floor(t) is the scale of the schedule's last entry whose step is ≤ t.
///
/// One guard applies to every rule and every option value validation accepts: the scale stays finite and
/// ≥ 2^-126 (the smallest normal float32). A growth whose result would not be finite leaves the scale
/// where it is, and no backoff (nor cerebras' clamp, even with min_scale 0) takes it below 2^-126. The
/// libraries guard less: Keras 3 and Megatron neither cap nor floor the scale (Keras 3 on JAX's CPU
/// backend even flushes 2^-127 to zero, and a scale of 0 or inf never moves again), PyTorch has no floor,
/// Cerebras does not check a growth for overflow, and DeepSpeed keeps its scale in float64 (it passes
/// 2^127 without reaching infinity); where the guard acts, a preset's sequence differs from its library's.
///
/// Rounding. The scale is a float32, as in every library but DeepSpeed and MindSpore's host-side
/// DynamicLossScaleManager (Python floats, float64: the same values while the factor is 2, DeepSpeed's
/// only one, and the scale stays in float32's range). Factors are doubles, as the libraries take them,
/// and each rule multiplies as its library does: pytorch, deepspeed and mixprec form scale × factor in
/// float64 and round it to float32 (PyTorch's kernel); keras, tf_keras, megatron, cerebras, ascend and
/// mindspore multiply float32 by the factor rounded to float32 (their float32 tensors).
///
/// Conformance. tests/conformance records these sequences from the libraries themselves (PyTorch,
/// DeepSpeed, Megatron, Keras 3, tf.keras, jmp, Cerebras, MindSpore; versions and results in the README's
/// conformance table) and the test suite replays them: scale bit for bit, every counter, skip decisions.
/// The guard is the only difference in the rules, with three documented exceptions: tf.keras advances the
/// optimizer's iterations on a skipped step (LossScaleOptimizer, as Keras 3, does not); DeepSpeed before
/// 0.17.1 grew one clean step earlier (the preset follows 0.17.1 and later); MindSpore's manager keeps a
/// float64 scale (the mindspore preset follows the float32 update cell that Model trains with). ascend
/// (Huawei's TensorFlow adapter, not on PyPI) is checked against its source only.

#include <mixprec/autodiff/tensor/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::amp {

/// The rules, one per library whose dynamic loss scaling mixprec reproduces (amp/loss_scale_rules.cpp:
/// one function each). Checkpoints store a rule by its position here: add a new rule last, before
/// `count` (not a rule: how many rules there are), and never reorder.
enum class ScaleRule : std::uint8_t {
    mixprec,
    keras,
    tf_keras,
    pytorch,
    deepspeed,
    megatron,
    cerebras,
    ascend,
    mindspore,
    count
};

/// The rule at position `index` of ScaleRule, or nothing past the last rule (for checkpoint readers).
std::optional<ScaleRule> scale_rule_at(std::uint64_t index);

/// What happens when a step overflows while the scale already sits at min_scale.
enum class AtMinScale : std::uint8_t {
    keep_going, ///< skip the step and carry on (the scale stays at min_scale)
    raise,      ///< throw loss_scale_error saying what to try
};

/// One step of a rising floor (LossScaleOptions::min_scale_schedule): from step `step` on, the scale
/// stays ≥ `scale`.
struct MinScaleStep {
    std::int64_t step = 0;
    float scale = 1.0f;
    friend bool operator==(const MinScaleStep&, const MinScaleStep&) = default;
};

/// The longest min_scale_schedule accepted (a bound for checkpoint readers).
inline constexpr std::size_t max_min_scale_steps = 1024;

struct LossScaleOptions {
    ScaleRule rule = ScaleRule::mixprec;
    bool dynamic = true;                 ///< false: the scale stays initial_scale
    float initial_scale = 32768.0f;      ///< 2^15
    std::int64_t growth_interval = 2000; ///< N: finite steps between growths
    double growth_factor = 2.0;          ///< > 1 (a double, as PyTorch's: see "Rounding" above)
    double backoff_factor = 0.5;         ///< in (0, 1)
    std::int64_t hysteresis = 1;         ///< overflows it takes to back off once (1: every overflow)
    bool consecutive_hysteresis = false; ///< deepspeed: refill hysteresis on every finite step
    float min_scale = 1.0f;              ///< backoff floor (rules that have one)
    float max_scale = 16777216.0f;       ///< growth cap, 2^24 (rules that have one)
    AtMinScale at_min_scale = AtMinScale::keep_going;
    double overflow_tolerance = 0.0; ///< cerebras: fraction of overflowing steps tolerated
    std::int64_t decrease_every = 2; ///< ascend: overflows (cumulative) per backoff
    /// A floor that rises over training: Mellempudi et al.'s enhanced loss scaling for float8_e5m2
    /// gradients, whose scale must stay high although spurious overflows keep backing it off. An entry
    /// {k, s} holds once k updates (skipped steps count) have been made: {0, s} from the start. The last
    /// entry that holds gives the floor; after each update of any rule a scale below it is raised to it
    /// (so is the initial scale). Steps strictly increasing and ≥ 0; scales finite, > 0, non-decreasing
    /// and ≤ max_scale; at most max_min_scale_steps entries; only for a dynamic scale. Empty: no floor but
    /// the rule's own. Every rule reads it.
    std::vector<MinScaleStep> min_scale_schedule = {};
};

/// The options that reproduce a library's rule and defaults: "mixprec", "keras", "tf_keras", "pytorch",
/// "deepspeed", "megatron", "cerebras", "ascend", "mindspore". std::invalid_argument lists the names
/// otherwise.
LossScaleOptions loss_scale_preset(std::string_view name);
/// The same for training whose gradients are in `half`: cerebras_pytorch starts and caps its scale at
/// 2^31 for cbfloat16 (2^15 otherwise); every other preset is the same for every dtype.
LossScaleOptions loss_scale_preset(std::string_view name, autodiff::Dtype half);
std::vector<std::string_view> loss_scale_preset_names();
std::string_view name_of(ScaleRule rule);

/// Whether `rule` reads the LossScaleOptions field `option` ("hysteresis", "min_scale", "max_scale",
/// "growth_factor", ...): the keras rule, for one, has no hysteresis, and ascend neither floor nor cap.
/// initial_scale, growth_interval, rule and dynamic are read by every rule. std::invalid_argument for a
/// name that is not a field.
bool rule_reads(ScaleRule rule, std::string_view option);

/// Thrown by update() when at_min_scale is raise and the scale cannot go lower.
class loss_scale_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// Everything the rules keep between steps: saved and restored whole by checkpoints.
struct LossScaleState {
    float scale = 1.0f;
    std::int64_t growth_counter = 0;    ///< c (good steps for ascend, steps since rescale for cerebras)
    std::int64_t hysteresis_left = 1;   ///< h
    std::int64_t iteration = 0;         ///< steps seen (deepspeed's cur_iter)
    std::int64_t last_overflow = -1;    ///< deepspeed's last_overflow_iter
    std::int64_t overflows_counted = 0; ///< cerebras' overflows since rescale, ascend's bad steps
    float unclamped_scale = 1.0f;       ///< cerebras: the scale before clamping
    std::int64_t growths = 0;           ///< times the scale grew
    std::int64_t backoffs = 0;          ///< times the scale backed off
    std::int64_t updates = 0;           ///< update() calls of a dynamic scale: min_scale_schedule's step
    friend bool operator==(const LossScaleState&, const LossScaleState&) = default;
};

class LossScale {
  public:
    /// Validates every option (std::invalid_argument naming the option and its value).
    explicit LossScale(LossScaleOptions options = {});

    float scale() const { return state_.scale; }
    const LossScaleOptions& options() const { return options_; }
    const LossScaleState& state() const { return state_; }
    void set_state(const LossScaleState& state);

    /// Moves the scale after one step whose gradients were all finite (or not).
    void update(bool finite);

    std::int64_t growth_count() const { return state_.growths; }
    std::int64_t backoff_count() const { return state_.backoffs; }

  private:
    static void check_schedule(const LossScaleOptions& o);
    /// The floor min_scale_schedule sets after `updates` updates (0 when none applies yet).
    float floor_at(std::int64_t updates) const;

    LossScaleOptions options_;
    LossScaleState state_;
};

} // namespace mixprec::amp
