#include <mixprec/models/layers/layer.hpp>

#include <mixprec/models/layers/detail/checks.hpp>

#include <mixprec/amp/telemetry.hpp>
#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/tape.hpp>

#include <algorithm>
#include <span>
#include <stdexcept>

namespace mixprec::models {

void Layer::set_name(std::string name) {
    if (built_) throw std::logic_error("layer '" + name_ + "': cannot rename a built layer");
    name_ = std::move(name);
}

void Layer::set_policy(amp::Policy policy) {
    if (built_) throw std::logic_error("layer '" + name_ + "': set its policy before building it");
    own_policy_ = std::move(policy);
}

const amp::Policy& Layer::policy() const {
    if (built_policy_) return *built_policy_;
    if (own_policy_) return *own_policy_;
    return amp::global_policy();
}

Shape Layer::build(const Shape& input_shape, Rng& init_rng) {
    if (built_) throw std::logic_error("layer '" + name_ + "' is already built");
    built_policy_ = policy();
    try {
        output_shape_ = do_build(input_shape, init_rng);
    } catch (...) {
        built_policy_.reset();
        throw;
    }
    input_shape_ = input_shape;
    built_ = true;
    return output_shape_;
}

namespace {

/// x's example shape: its shape without the batch axis (empty for a scalar).
Shape example_shape_of(const Tensor& x) {
    if (x.rank() == 0) return Shape{};
    return Shape(std::span<const std::size_t>(x.shape().begin() + 1, x.rank() - 1));
}

} // namespace

Tensor Layer::operator()(const Tensor& x, const CallContext& context) {
    if (!built_) {
        const std::string which =
            name_.empty() ? "an unnamed " + kind() + " layer" : "layer '" + name_ + "' (" + kind() + ")";
        if (!context.building)
            throw std::logic_error(which + " is called before it is built: build it, or the model it belongs to (whose "
                                           "call() must pass its context on to every layer)");
        const auto& tracked = context.building->tracked;
        if (std::find(tracked.begin(), tracked.end(), this) == tracked.end())
            throw std::logic_error(which + " is called by the model but is not one of its layers, so it would never be "
                                           "trained or saved: create it with the model's track()");
        build(example_shape_of(x), context.building->init_rng);
    }
    detail::check_batch(*this, input_shape_, x.shape());
    const autodiff::OpScope scope(name_);
    amp::StepTelemetry* telemetry = scope.outermost() ? amp::StepTelemetry::active() : nullptr;
    std::optional<autodiff::RoundingRecorder> rounding;
    if (telemetry)
        rounding.emplace(
            autodiff::RoundingRecorderOptions{.histogram = telemetry->options().histogram, .writes = false});
    Tensor y = forward(compute_input(x), context);
    if (scope.outermost() && context.layer_scaling)
        if (const float factor = context.layer_scaling->factor(name_); factor != 1.0f)
            y = autodiff::scale_gradient(y, factor);
    if (telemetry) {
        autodiff::want_gradient_stats(y);
        telemetry->layer_called(name_, y, rounding->total());
    }
    return y;
}

std::optional<Tensor> Layer::call_fused(const Layer& next, const Tensor& x, const CallContext& context) {
    if (!built_ || !next.built() || context.building || context.layer_scaling || amp::StepTelemetry::active() ||
        !fuses_with(next, context))
        return std::nullopt;
    const autodiff::Dtype compute = policy().compute_dtype();
    // next must take this layer's output as it is, as operator() would give it
    if (!next.keeps_input_dtype() && next.policy().compute_dtype() != compute) return std::nullopt;
    detail::check_batch(*this, input_shape_, x.shape());
    const autodiff::OpScope scope(name_);
    return forward_fused(next, compute_input(x), context);
}

Tensor Layer::compute_input(const Tensor& x) const {
    const autodiff::Dtype compute = policy().compute_dtype();
    return keeps_input_dtype() || x.dtype() == compute ? x : autodiff::cast(x, compute);
}

Tensor Layer::forward_fused(const Layer& next, const Tensor&, const CallContext&) {
    throw std::logic_error("layer '" + name_ + "' (" + kind() + ") does not fuse with a " + next.kind() + " layer");
}

std::size_t Layer::count_params() const {
    std::size_t n = 0;
    for (const Variable& v : variables()) n += v.shape().elements();
    return n;
}

Variable Layer::make_variable(const Tensor& initial, const std::string& name, bool trainable) const {
    Variable v(initial, name_ + "/" + name, trainable && trainable_);
    v.set_working_dtype(policy().compute_dtype());
    if (trainable) made_trainable_.push_back(v);
    return v;
}

bool Layer::trainable() const {
    if (made_trainable_.empty()) return trainable_;
    return std::any_of(made_trainable_.begin(), made_trainable_.end(), [](const Variable& v) { return v.trainable(); });
}

void Layer::set_trainable(bool trainable) {
    trainable_ = trainable;
    for (Variable& v : made_trainable_) v.set_trainable(trainable);
}

} // namespace mixprec::models
