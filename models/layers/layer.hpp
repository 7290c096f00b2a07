#pragma once
/// Layer: the unit models are built from, as in Keras. A layer is configured when constructed, builds
/// its variables when it first learns its input shape, and is then called on batches.
///
/// Every layer follows a dtype policy (its own, or the global one at the moment it is built): its
/// variables are float32 masters whose working copies are in the policy's compute dtype, and a call casts
/// a floating input to that dtype first (recorded on the tape), so a float32 batch fed to a
/// mixed_float16 model is computed in float16 from the first layer on.
///
/// Shapes given to build() and returned by it are per example: without the batch axis.

#include <mixprec/amp/policy.hpp>
#include <mixprec/autodiff/tensor/rng.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>
#include <mixprec/autodiff/variable.hpp>
#include <mixprec/optim/optimizer.hpp>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mixprec::models {

using autodiff::Rng;
using autodiff::Shape;
using autodiff::Tensor;
using autodiff::Variable;

/// A pair of spatial sizes: (rows, columns).
using Size2 = std::array<std::size_t, 2>;

class Layer;

/// While a Model builds (Model::build runs its call() once on a batch of one example), the layers it
/// tracks and the generator their initial values come from: a tracked layer that is not built yet builds
/// itself on its first call, for the examples it is called on, as in Keras.
struct BuildScope {
    Rng& init_rng;
    std::vector<const Layer*> tracked; ///< the model's layers; calling any other unbuilt layer is an error
};

/// What a call needs besides its input.
struct CallContext {
    bool training = false;          ///< dropout is active only when training
    Rng* dropout_rng = nullptr;     ///< required by Dropout when training
    BuildScope* building = nullptr; ///< set by Model::build only
    /// Per-layer loss scaling (amp/layer_scales.hpp), set by a training step of a chain of layers: each
    /// outermost layer call multiplies the gradient flowing back into its output by its factor.
    optim::LayerScaling* layer_scaling = nullptr;
    /// The scales of FP8 products (autodiff/ops_fp8.hpp), set by a training step whose optimizer keeps
    /// them: under a policy with FP8 products (mixed_float8) a Dense layer multiplies in FP8 when it has
    /// them, and in the compute dtype (bfloat16) otherwise, as in evaluation.
    autodiff::Fp8Scales* fp8 = nullptr;
};

class Layer {
  public:
    virtual ~Layer() = default;

    /// "Dense", "Conv2D", ... (Keras's class names).
    virtual std::string kind() const = 0;
    /// Unique within a model; Sequential names unnamed layers after their kind ("dense", "dense_1").
    const std::string& name() const { return name_; }
    void set_name(std::string name);

    /// The policy given to this layer, if any (otherwise the global policy is used at build).
    void set_policy(amp::Policy policy);
    /// The policy in effect: the layer's own, else the one the layer was built with, else the global one.
    const amp::Policy& policy() const;

    /// Creates the variables for examples of `input_shape` (initial values drawn from `init_rng`) and
    /// returns the shape of one output example. Fixes the policy. shape_error naming the layer, the shape
    /// it got and the shape it expects when the input does not fit. Building twice is a logic_error.
    Shape build(const Shape& input_shape, Rng& init_rng);
    bool built() const { return built_; }
    const Shape& input_shape() const { return input_shape_; }
    const Shape& output_shape() const { return output_shape_; }

    /// Whether training changes this layer's variables (Keras's `layer.trainable`). set_trainable(false)
    /// freezes the layer: its variables stop being trainable, so they leave the model's
    /// trainable_variables() (fit and the optimizer leave them alone; the optimizer keeps their slots) and
    /// tapes stop watching them; set_trainable(true) unfreezes them. Before build, it applies to the
    /// variables build creates. A variable a layer creates non-trainable stays so either way.
    /// Checkpoints save each variable's flag and load_checkpoint restores it.
    bool trainable() const;
    void set_trainable(bool trainable);

    /// Forward pass on a batch (batch axis first): checks that x is a batch of examples of the built shape
    /// (shape_error naming the layer, the example shape, the rank and shape a batch of them has, and x's
    /// shape and rank; "add the batch axis" when x is one example without it), casts a floating input to
    /// the compute dtype, then calls forward(). A layer not built yet builds itself for x's examples when the
    /// context carries a BuildScope that tracks it (Model::build); otherwise it is a logic_error.
    Tensor operator()(const Tensor& x, const CallContext& context = {});

    /// next(this(x)) in one pass where the two layers fuse (fuses_with: Conv2D and the MaxPool2D after
    /// it), with the same bits: both built, a floating x checked and cast as operator() does, and nothing
    /// that needs this layer's own output (no telemetry, no per-layer scaling, not building). Otherwise
    /// none, and the caller calls the two in turn. Sequential asks each layer about the next.
    std::optional<Tensor> call_fused(const Layer& next, const Tensor& x, const CallContext& context);

    /// Every variable of the layer (trainable or not) in a fixed order, named "<layer>/<variable>".
    virtual std::vector<Variable> variables() const { return {}; }
    std::size_t count_params() const;

    /// A description of the configuration for summaries: "units=512, activation=relu".
    virtual std::string config() const { return {}; }

  protected:
    Layer() = default;
    Layer(const Layer&) = default;
    Layer& operator=(const Layer&) = default;

    /// Creates the variables (built policy in policy()) and returns the output example shape.
    virtual Shape do_build(const Shape& input_shape, Rng& init_rng) = 0;
    /// The computation, on x already in the compute dtype with the built example shape.
    virtual Tensor forward(const Tensor& x, const CallContext& context) = 0;
    /// For layers whose input is not a floating batch to cast (Embedding reads ids): true keeps x as is.
    virtual bool keeps_input_dtype() const { return false; }
    /// Whether forward_fused can run this layer and `next` as one in this context: by default no.
    virtual bool fuses_with(const Layer& /*next*/, const CallContext& /*context*/) { return false; }
    /// forward() of this layer and then of `next` in one (x as forward() gets it), where fuses_with().
    virtual Tensor forward_fused(const Layer& next, const Tensor& x, const CallContext& context);
    /// A float32 master initialized from `initial`, set to the policy's compute dtype, named "<layer>/<name>".
    Variable make_variable(const Tensor& initial, const std::string& name, bool trainable = true) const;

  private:
    /// x as forward() takes it: cast to the policy's compute dtype, unless keeps_input_dtype().
    Tensor compute_input(const Tensor& x) const;
    std::string name_;
    std::optional<amp::Policy> own_policy_;
    std::optional<amp::Policy> built_policy_;
    bool built_ = false;
    bool trainable_ = true;
    mutable std::vector<Variable> made_trainable_; // what make_variable created trainable: set_trainable's reach
    Shape input_shape_;
    Shape output_shape_;
};

} // namespace mixprec::models
