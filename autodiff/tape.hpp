#pragma once
/// GradientTape: reverse-mode automatic differentiation in the style of Keras / TensorFlow.
///
///   GradientTape tape;                        // records while it lives (RAII), on this thread
///   Tensor y = mul(x, x);                     // ops on watched tensors are recorded
///   auto [dx] = tape.gradient(y, {x});        // dy/dx, same shape and dtype as x
///
/// A tensor is watched when the tape was told to (`watch`), when it is a trainable Variable's value read
/// inside the tape, or when a recorded op computed it from watched tensors. Gradients have the dtype of
/// the tensor they belong to: the gradient of a float16 tensor is computed and stored in float16, so it
/// underflows where real hardware would. Fan-out gradients add up (rounded in that dtype).
///
/// What each source gets (TensorFlow's rules, with one stricter case):
///
///   source                                               gradient()                    gradient_or_none()
///   the target depends on it                             d target / d source           the same
///   watched, the target does not depend on it            zeros of its shape and dtype  nullopt
///     ("unconnected")
///   a Tensor this tape never watched                     zeros of its shape and dtype  nullopt
///   a Variable this tape never watched                   std::logic_error naming it    nullopt
///
/// gradient() answers unconnected sources as TensorFlow's UnconnectedGradients.ZERO does
/// (Unconnected::zero), gradient_or_none() as UnconnectedGradients.NONE (Unconnected::none). A Tensor
/// that is not watched is one of the many constants a computation reads (a batch of data), so it is
/// unconnected. A Variable is different: its gradient goes to an optimizer, and a Variable the tape never
/// watched is a bug, not a parameter without influence — its value was read before the tape existed
/// (the working copy is cached, so the later computation used it without the tape seeing the read), it is
/// not trainable, or the tape was made with watch_accessed_variables = false. A zero would silently stop
/// it from training, so gradient() throws instead, naming the variable. A Variable is watched when it was
/// read (trainable, watch_accessed_variables) while this tape recorded, or given to watch(variable).
///
/// The reverse pass walks the recording backwards in a loop (no recursion: a chain of 100,000 ops is
/// fine) and drops each gradient and backward closure as soon as nothing needs it. A non-persistent tape
/// answers one `gradient` call and then stops recording; a persistent one answers any number and keeps
/// its recording until it is destroyed. Nested tapes record independently, but a tape does not record the
/// ops another tape's `gradient` runs, so higher-order gradients are not available.
///
/// Telemetry: a tape made with {.telemetry = true} counts what every rounding of its reverse pass does
/// (rounding.hpp). After gradient(), gradient_stats() says what the rounding that produced a tensor's or
/// a variable's gradient did (the last one: a fan-out sum's), and scope_stats() sums everything the
/// backward functions of the ops recorded inside one OpScope rounded (a layer's whole backward pass).

#include <mixprec/autodiff/tape_hooks.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mixprec::autodiff {

class Variable;

/// One gradient per op input, in the order the op listed them; nullopt where an input gets none.
using Gradients = std::vector<std::optional<Tensor>>;
/// Computes an op's input gradients from its output gradient `dy` (the output's shape and dtype).
/// It must capture evaluated tensors only, never lazy xtensor expressions.
using BackwardFn = std::function<Gradients(const Tensor& dy)>;

struct GradientTapeOptions {
    bool persistent = false;              ///< allow more than one gradient() call
    bool watch_accessed_variables = true; ///< watch trainable Variables read while recording
    bool telemetry = false;               ///< count what the reverse pass rounds (gradient_stats, scope_stats)
    bool telemetry_histogram = false;     ///< and the exponent histograms (RoundingStats::exponent_histogram)
};

/// Ops recorded while an OpScope lives on this thread belong to its name (an inner scope adds nothing:
/// the outermost one names them), so that a tape with telemetry can sum what their backward functions
/// round. Every layer call opens one with the layer's name.
class OpScope {
  public:
    explicit OpScope(std::string name);
    ~OpScope();
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;
    /// Whether this scope names the ops recorded now (false inside another scope).
    bool outermost() const { return outermost_; }

  private:
    bool outermost_;
};

/// What a source the target does not depend on gets: zeros (gradient()) or nullopt (gradient_or_none()).
enum class Unconnected { zero, none };

class GradientTape {
  public:
    explicit GradientTape(GradientTapeOptions options = {});
    ~GradientTape();
    GradientTape(const GradientTape&) = delete;
    GradientTape& operator=(const GradientTape&) = delete;

    /// Records ops on `tensor` from now on.
    void watch(const Tensor& tensor);
    /// Watches the variable's current value (its working copy) for this tape.
    void watch(const Variable& variable);

    /// d target / d source for each source: zeros of the source's shape and dtype where unconnected or
    /// not watched. The target's gradient is seeded with ones. Throws std::logic_error if the target was
    /// not recorded by this tape or the tape was used up (non-persistent, after one call).
    std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources);
    /// Gradients for variables, each in the dtype of the value the tape saw it read (its working dtype),
    /// summed over every value of it the tape saw; zeros for a variable the tape watched that the target
    /// does not depend on. std::logic_error naming the first variable this tape never watched (see the
    /// table above) — checked before the tape is used up — and as the Tensor overload.
    std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& sources);
    /// As gradient(), with nullopt for unconnected or unwatched sources (never an error for those).
    std::vector<std::optional<Tensor>> gradient_or_none(const Tensor& target, const std::vector<Tensor>& sources);
    std::vector<std::optional<Tensor>> gradient_or_none(const Tensor& target, const std::vector<Variable>& sources);

    /// With telemetry, after gradient(): what the rounding that produced the gradient of `tensor` did
    /// (nullopt when it got none, or it was not asked for with want_gradient_stats). For a variable, the
    /// gradient gradient() returned for it.
    std::optional<RoundingStats> gradient_stats(const Tensor& tensor) const;
    std::optional<RoundingStats> gradient_stats(const Variable& variable) const;
    /// With telemetry, after gradient(): everything the backward functions of the ops recorded inside
    /// OpScope `name` rounded ("" for ops recorded outside any scope), with the sums of fan-out gradients
    /// they produced; empty stats when there were none.
    RoundingStats scope_stats(const std::string& name) const;
    /// The OpScopes of the ops this tape recorded, in the order each first recorded one (a chain of
    /// layers: input side first).
    const std::vector<std::string>& scopes() const { return scope_order_; }

    const GradientTapeOptions& options() const { return options_; }
    bool is_recording() const { return recording_; }
    bool is_watched(const Tensor& tensor) const { return watched_.count(tensor.id()) != 0; }
    std::size_t recorded_ops() const { return entries_.size(); }

  private:
    friend bool should_record(std::span<const Tensor* const> inputs);
    friend void record(const Tensor& output, std::span<const Tensor* const> inputs, BackwardFn backward);
    friend void notify_variable_read(std::uint64_t variable_uid, const Tensor& value);
    friend void want_gradient_stats(const Tensor& tensor);

    struct Input {
        std::uint64_t id;
        Shape shape;
        Dtype dtype;
        bool watched = true; ///< watched when the op was recorded (else nothing can want its gradient)
    };
    struct Entry {
        std::vector<Input> inputs;
        std::uint64_t output;
        std::shared_ptr<BackwardFn> backward;     // shared by every tape that recorded the op
        std::shared_ptr<const std::string> scope; // the OpScope it was recorded in, or null
    };

    std::vector<std::optional<Tensor>> run(const Tensor& target, const std::vector<Input>& sources, Unconnected mode);
    std::vector<std::optional<Tensor>> variable_gradients(const Tensor& target, const std::vector<Variable>& sources,
                                                          Unconnected mode);
    void check_watched(const std::vector<Variable>& sources) const;
    void stop_recording();

    GradientTapeOptions options_;
    bool recording_ = true;
    bool used_ = false;
    std::vector<Entry> entries_;
    std::unordered_set<std::uint64_t> watched_;
    std::unordered_map<std::uint64_t, std::vector<Input>> variable_reads_; // variable uid -> values it read
    std::unordered_map<std::uint64_t, RoundingStats> gradient_stats_;      // tensor id -> its gradient's rounding
    std::unordered_map<std::uint64_t, RoundingStats> variable_stats_;      // variable uid -> its gradient's rounding
    std::unordered_map<std::string, RoundingStats> scope_stats_;
    std::vector<std::string> scope_order_;
    std::unordered_set<std::uint64_t> stats_wanted_; // tensor ids whose gradient_stats to keep
};

/// True when some tape on this thread is recording and watches one of `inputs`. Ops call it to skip
/// building a backward closure nobody needs.
bool should_record(std::initializer_list<const Tensor*> inputs);

/// Records `output = op(inputs)` on every recording tape of this thread that watches one of the inputs.
void record(const Tensor& output, std::initializer_list<const Tensor*> inputs, BackwardFn backward);

/// The same for ops with a variable number of inputs (concat).
bool should_record(std::span<const Tensor* const> inputs);
void record(const Tensor& output, std::span<const Tensor* const> inputs, BackwardFn backward);

/// Inside a backward function: whether the tape running it wants the gradient of the op's input number
/// `input` (false for an input no watched tensor reaches, such as a batch of data; true outside a
/// backward pass). An op may skip computing such a gradient and return std::nullopt in its place.
bool gradient_needed(std::size_t input);

/// Asks every recording tape with telemetry on this thread to keep gradient_stats() of `tensor` (variables'
/// values are kept without asking; other gradients are not measured, which keeps telemetry cheap).
void want_gradient_stats(const Tensor& tensor);

/// The same values as a new tensor that no tape watches: gradients do not flow through it.
Tensor stop_gradient(const Tensor& x);

} // namespace mixprec::autodiff
