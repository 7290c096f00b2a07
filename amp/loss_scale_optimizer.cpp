#include <mixprec/amp/loss_scale_optimizer.hpp>

#include <mixprec/amp/unscale.hpp>
#include <mixprec/autodiff/ops_elementwise.hpp>

#include <cmath>
#include <stdexcept>

namespace mixprec::amp {
namespace {

void check_counts(std::size_t grads, std::size_t variables) {
    if (grads != variables)
        throw std::invalid_argument("LossScaleOptimizer: " + std::to_string(grads) + " gradients for " +
                                    std::to_string(variables) + " variables");
}

} // namespace

LossScaleOptimizer::LossScaleOptimizer(std::unique_ptr<optim::Optimizer> inner, LossScaleOptions options)
    : inner_(std::move(inner)), scale_(options) {
    if (!inner_) throw std::invalid_argument("LossScaleOptimizer: the inner optimizer is null");
    if (dynamic_cast<LossScaleOptimizer*>(inner_.get()) != nullptr)
        throw std::invalid_argument("LossScaleOptimizer: the inner optimizer is already a LossScaleOptimizer");
}

LossScaleOptimizer::LossScaleOptimizer(std::unique_ptr<optim::Optimizer> inner, LossScaleOptions options,
                                       LayerScaleOptions per_layer)
    : LossScaleOptimizer(std::move(inner), options) {
    int exponent = 0;
    if (std::frexp(options.initial_scale, &exponent) != 0.5f)
        throw std::invalid_argument("LossScaleOptimizer: per-layer loss scaling needs a power of two as the initial "
                                    "scale, not " +
                                    std::to_string(options.initial_scale));
    layers_.emplace(per_layer, exponent - 1);
}

autodiff::Tensor LossScaleOptimizer::scale_loss(const autodiff::Tensor& loss) const {
    return autodiff::scale(loss, scale());
}

float LossScaleOptimizer::inverse_scale(const autodiff::Variable& variable) const {
    return layers_ ? 1.0f / layers_->gradient_scale(variable.name()) : 1.0f / scale_.scale();
}

void LossScaleOptimizer::set_communicator(std::shared_ptr<optim::Communicator> communicator,
                                          DataParallelOptions options) {
    if (!communicator)
        exchange_.reset();
    else
        exchange_.emplace(std::move(communicator), options);
}

std::span<const float> LossScaleOptimizer::inverse_scales(const std::vector<autodiff::Variable>& variables) {
    inverse_scales_.resize(variables.size());
    for (std::size_t i = 0; i < variables.size(); ++i) inverse_scales_[i] = inverse_scale(variables[i]);
    return inverse_scales_;
}

bool LossScaleOptimizer::apply(const std::vector<autodiff::Tensor>& grads,
                               const std::vector<autodiff::Variable>& variables) {
    check_counts(grads.size(), variables.size());
    if (distributed()) {
        const UnscaleResult r = exchange_->reduce(grads, inverse_scales(variables), buffers_);
        return finish(r.finite, r.squared_norm, buffers_, variables);
    }
    buffers_.resize(grads.size());
    bool finite = true;
    double squared = 0;
    for (std::size_t i = 0; i < grads.size(); ++i) {
        buffers_[i].resize(grads[i].size());
        const UnscaleResult r = unscale(grads[i], inverse_scale(variables[i]), buffers_[i]);
        finite = finite && r.finite;
        squared += r.squared_norm;
    }
    return finish(finite, squared, buffers_, variables);
}

bool LossScaleOptimizer::apply_float32(std::vector<std::vector<float>>& grads,
                                       const std::vector<autodiff::Variable>& variables) {
    check_counts(grads.size(), variables.size());
    if (distributed()) {
        const UnscaleResult r = exchange_->reduce(grads, inverse_scales(variables));
        return finish(r.finite, r.squared_norm, grads, variables);
    }
    bool finite = true;
    double squared = 0;
    for (std::size_t i = 0; i < grads.size(); ++i) {
        const UnscaleResult r = unscale_in_place(grads[i], inverse_scale(variables[i]));
        finite = finite && r.finite;
        squared += r.squared_norm;
    }
    return finish(finite, squared, grads, variables);
}

bool LossScaleOptimizer::finish(bool finite, double squared_norm, std::vector<std::vector<float>>& grads,
                                const std::vector<autodiff::Variable>& variables) {
    if (finite) inner_->apply_float32(grads, variables); // validates sizes before changing anything
    if (layers_) {
        autodiff::Dtype gradients = autodiff::Dtype::float32; // what the tape rounded them to
        for (const autodiff::Variable& v : variables)
            if (v.working_dtype() != autodiff::Dtype::float32) gradients = v.working_dtype();
        if (distributed()) layers_->agree(exchange_->communicator());
        layers_->update(finite, gradients);
    } else {
        scale_.update(finite);
    }
    if (fp8_) {
        if (distributed()) fp8_->agree(exchange_->communicator());
        fp8_->end_step();
    }
    last_skipped_ = !finite;
    skipped_ += finite ? 0 : 1;
    last_norm_ = finite ? std::sqrt(squared_norm) : INFINITY;
    return finite;
}

void LossScaleOptimizer::accumulate(const std::vector<autodiff::Tensor>& grads) {
    if (micro_batches_ == 0) accumulated_.clear();
    optim::accumulate_float32(accumulated_, grads, "LossScaleOptimizer::accumulate");
    ++micro_batches_;
}

bool LossScaleOptimizer::apply_accumulated(const std::vector<autodiff::Variable>& variables) {
    if (micro_batches_ == 0) throw std::logic_error("LossScaleOptimizer::apply_accumulated: nothing was accumulated");
    const bool applied = apply_float32(accumulated_, variables);
    accumulated_.clear();
    micro_batches_ = 0;
    return applied;
}

std::vector<optim::StateValue> LossScaleOptimizer::state_values() const {
    std::vector<optim::StateValue> values = inner_->state_values();
    for (optim::StateValue& v : loss_scale_values(snapshot())) values.push_back(std::move(v));
    if (layers_)
        for (optim::StateValue& v : layers_->values()) values.push_back(std::move(v));
    if (fp8_)
        for (optim::StateValue& v : fp8_->values()) values.push_back(std::move(v));
    return values;
}

void LossScaleOptimizer::load_state(const optim::OptimizerState& state,
                                    const std::vector<autodiff::Variable>& variables) {
    if (state.kind != kind())
        throw std::invalid_argument("load_state: the state is of optimizer '" + state.kind + "', this optimizer is '" +
                                    kind() + "'");
    optim::OptimizerState inner_state = state;
    inner_state.kind = inner_->kind();
    inner_state.values.clear();
    std::vector<optim::StateValue> own, per_layer, fp8;
    for (const optim::StateValue& v : state.values)
        (v.name.starts_with(loss_scale_prefix)    ? own
         : v.name.starts_with(layer_scale_prefix) ? per_layer
         : v.name.starts_with(fp8_prefix)         ? fp8
                                                  : inner_state.values)
            .push_back(v);
    const LossScaleSnapshot snap = loss_scale_snapshot(own);
    LossScale scale(snap.options);
    scale.set_state(snap.state);
    if (per_layer.empty() != !layers_)
        throw std::invalid_argument(layers_ ? "load_state: the state has no per-layer loss scales, and this optimizer "
                                              "scales per layer"
                                            : "load_state: the state has per-layer loss scales, and this optimizer "
                                              "has one global scale (make it with LayerScaleOptions)");
    std::optional<LayerScales> layers;
    if (layers_) layers.emplace(LayerScales::from_values(per_layer));
    if (fp8.empty() != !fp8_)
        throw std::invalid_argument(fp8_ ? "load_state: the state has no FP8 scales, and this optimizer keeps them"
                                         : "load_state: the state has FP8 scales, and this optimizer keeps none "
                                           "(call scale_fp8 first)");
    std::optional<Fp8Scaling> fp8_scaling;
    if (fp8_) {
        fp8_scaling.emplace(Fp8Scaling::from_values(fp8));
        const auto& saved = fp8_scaling->options();
        const auto& mine = fp8_->options();
        const auto describe = [](const Fp8ScalingOptions& o) {
            return std::string(o.recipe == Fp8Recipe::delayed ? "delayed" : "current") + " recipe" +
                   (o.scale_gradients ? "" : ", gradients unscaled") +
                   (o.stochastic_gradients ? ", gradients rounded stochastically (seed " + std::to_string(o.seed) + ")"
                                           : "");
        };
        if (saved != mine)
            throw std::invalid_argument("load_state: the state's FP8 scaling (" + describe(saved) +
                                        ") differs from this optimizer's (" + describe(mine) +
                                        "): resume with the options it was saved with");
    }
    inner_->load_state(inner_state, variables); // all or nothing; from here on nothing can fail
    scale_ = scale;
    layers_ = std::move(layers);
    fp8_ = std::move(fp8_scaling);
    skipped_ = snap.skipped_steps;
    last_skipped_ = snap.last_step_skipped;
    last_norm_ = snap.last_gradient_norm;
}

LossScaleSnapshot LossScaleOptimizer::snapshot() const {
    return {scale_.options(), scale_.state(), skipped_, last_skipped_, last_norm_};
}

void LossScaleOptimizer::set_counters(std::int64_t skipped_steps, bool last_step_skipped, double last_gradient_norm) {
    if (skipped_steps < 0) throw std::invalid_argument("LossScaleOptimizer: negative skipped_steps");
    skipped_ = skipped_steps;
    last_skipped_ = last_step_skipped;
    last_norm_ = last_gradient_norm;
}

} // namespace mixprec::amp
