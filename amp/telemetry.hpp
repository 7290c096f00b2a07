#pragma once
/// A training step's rounding telemetry, by name: what rounding into the compute dtype did to each
/// variable's gradient, to each layer's output gradient, and in each layer's forward and backward pass.
///
///   name                   what was rounded
///   "<variable>"           the variable's gradient, as the tape returned it ("dense_1/kernel")
///   "<layer>/output_grad"  the gradient of the layer's output, the one flowing back into it (summed over
///                          the layer's calls when it was called more than once)
///   "<layer>/forward"      everything the layer's forward pass rounded: its output and its intermediate
///                          values (a Dense's product before its activation); not its variables' working
///                          copies (rounded from the masters after each update, not by the computation)
///   "<layer>/backward"     everything the backward functions of the layer's ops rounded: its weight and
///                          input gradients and the intermediate ones
///   "loss/backward"        the same for ops outside any layer: the loss, and a model's own ops
///   "<layer>/fp8_input",   an FP8 layer's scaled casts of its input, its kernel and its output gradient
///   "<layer>/fp8_kernel",  into float8_e4m3 / float8_e5m2 (autodiff/ops_fp8.hpp, amp/fp8_scaling.hpp):
///   "<layer>/fp8_output_grad"  "overflow" counts the values that saturated
///
/// Each entry is an autodiff::RoundingStats (count, zeros, underflow, subnormal, overflow, nonfinite,
/// amax; optionally the exponent histogram): exact counts from the kernels that round (rounding.hpp).
/// Values that are never rounded (float32 ones) are classified as stored, so nothing shows as lost.
///
///   amp::StepTelemetry telemetry;                               // before the forward pass
///   autodiff::GradientTape tape({.telemetry = true});
///   auto loss = loss_fn(y, model(x, {.training = true}));
///   auto grads = tape.gradient(opt.scale_loss(loss), variables);
///   amp::Telemetry t = telemetry.collect(tape, variables);      // t["dense/kernel"].underflow, ...
///
/// fit() makes a StepTelemetry for the steps FitOptions::telemetry_every asks for and hands the result to
/// callbacks in StepLogs::telemetry. Its train step (and one of your own that should report) makes its
/// tape with telemetry when StepTelemetry::active() is set and calls record() after gradient().

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>
#include <mixprec/autodiff/variable.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::amp {

/// Named RoundingStats in the order they were added.
class Telemetry {
  public:
    using Entry = std::pair<std::string, autodiff::RoundingStats>;

    /// Adds `stats` to the entry `name` (a new entry at the end if there is none).
    void add(const std::string& name, const autodiff::RoundingStats& stats);
    /// Adds every entry of `other`.
    Telemetry& operator+=(const Telemetry& other);
    /// The entry `name`, or null.
    const autodiff::RoundingStats* find(const std::string& name) const;
    /// The entry `name`; std::out_of_range naming it if there is none.
    const autodiff::RoundingStats& operator[](const std::string& name) const;

    const std::vector<Entry>& entries() const { return entries_; }
    bool empty() const { return entries_.empty(); }

  private:
    std::vector<Entry> entries_;
};

/// Collects the forward half of a step's telemetry while it lives on this thread: every outermost layer
/// call (Layer::operator()) reports what its forward pass rounded and the tensor it returned. collect()
/// then adds the backward half from a tape made with telemetry.
class StepTelemetry {
  public:
    explicit StepTelemetry(autodiff::RoundingRecorderOptions options = {});
    ~StepTelemetry();
    StepTelemetry(const StepTelemetry&) = delete;
    StepTelemetry& operator=(const StepTelemetry&) = delete;

    /// The collector of this thread, or null.
    static StepTelemetry* active();
    const autodiff::RoundingRecorderOptions& options() const { return options_; }

    /// A layer call: `forward` is what its forward pass rounded, `output` what it returned.
    void layer_called(const std::string& layer, const autodiff::Tensor& output, const autodiff::RoundingStats& forward);
    /// A rounding reported by name, outside the tape's and the layers' reckoning (the FP8 casts): added to
    /// the entry `name`, after every other entry.
    void add(const std::string& name, const autodiff::RoundingStats& stats);

    /// The step's telemetry (see the table above): each variable, then each layer in the order of its
    /// first call, then "loss/backward", from the gradients `tape` computed last. std::logic_error if
    /// `tape` was not made with telemetry.
    Telemetry collect(const autodiff::GradientTape& tape, const std::vector<autodiff::Variable>& variables) const;

    /// Adds collect(tape, variables) to result() and starts the forward half afresh: a step that runs
    /// several batches (gradient accumulation) records each, and result() sums them.
    void record(const autodiff::GradientTape& tape, const std::vector<autodiff::Variable>& variables);
    const Telemetry& result() const { return result_; }

  private:
    struct Layer {
        std::string name;
        autodiff::RoundingStats forward;
        std::vector<autodiff::Tensor> outputs; // kept so that their ids stay theirs until collect()
    };
    autodiff::RoundingRecorderOptions options_;
    StepTelemetry* outer_;
    std::vector<Layer> layers_;
    Telemetry added_;
    Telemetry result_;
};

} // namespace mixprec::amp
