#include <mixprec/models/training/fit.hpp>

#include <mixprec/amp/telemetry.hpp>
#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_shape.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/models/training/detail/figures.hpp>
#include <mixprec/optim/optimizer.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace mixprec::models {

namespace {

using Clock = std::chrono::steady_clock;
using detail::check_fits;
using detail::first_accuracy;
using detail::measure;
using detail::Ranks;
using detail::Share;
using detail::Totals;

void validate(const FitOptions& options) {
    if (options.epochs < 1) throw std::invalid_argument("fit: epochs must be at least 1");
    if (options.batch_size < 1) throw std::invalid_argument("fit: batch_size must be at least 1");
    if (options.max_steps < 0) throw std::invalid_argument("fit: max_steps must not be negative");
    if (options.accumulate_steps < 1) throw std::invalid_argument("fit: accumulate_steps must be at least 1");
    if (options.rank_digest_every < 0) throw std::invalid_argument("fit: rank_digest_every must not be negative");
    for (const CallbackRef& c : options.callbacks)
        if (!c.get()) throw std::invalid_argument("fit: a callback is null");
}

} // namespace

std::vector<std::size_t> shuffled_order(std::size_t n, Rng& rng) {
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    return order;
}

BatchGradients batch_gradients(const TrainStep& s) {
    BatchGradients result;
    amp::StepTelemetry* telemetry = amp::StepTelemetry::active();
    optim::LayerScaling* per_layer = s.optimizer.layer_scaling();
    if (per_layer && !s.model.layers_form_a_chain())
        throw std::invalid_argument("per-layer loss scaling needs a model whose layers form a chain (a Sequential): "
                                    "where two paths of gradients meet, their layers' scales would differ");
    autodiff::GradientTape tape({.telemetry = telemetry != nullptr || per_layer != nullptr,
                                 .telemetry_histogram = telemetry != nullptr && telemetry->options().histogram});
    result.y_pred = s.model(
        s.x,
        {.training = true, .dropout_rng = &s.dropout_rng, .layer_scaling = per_layer, .fp8 = s.optimizer.fp8_scales()});
    autodiff::Tensor loss = s.loss(s.y, result.y_pred);
    result.loss = loss.flat(0);
    if (s.loss_weight != 1) loss = autodiff::scale(loss, s.loss_weight);
    result.grads = tape.gradient(s.optimizer.scale_loss(loss), s.variables);
    if (telemetry) telemetry->record(tape, s.variables);
    if (per_layer) per_layer->observe(tape);
    return result;
}

TrainStepResult train_step(const TrainStep& s, const GradientHook& hook) {
    BatchGradients g = batch_gradients(s);
    if (hook) hook(s.step, g.grads);
    const bool applied = s.optimizer.apply(g.grads, s.variables);
    return {g.loss, std::move(g.y_pred), applied};
}

namespace {

/// An epoch resumed in its middle: its first accuracy counts the whole epoch from the training state
/// (state.epoch_correct, saved in checkpoints); its other metrics count from the resume.
void resumed_accuracy(const std::vector<Metric>& metrics, const TrainingState& state, const Totals& totals,
                      Metrics& values) {
    if (totals.examples >= double(state.epoch_examples) || state.epoch_examples == 0) return;
    for (std::size_t i = 0; i < metrics.size(); ++i)
        if (metrics[i].is_accuracy()) {
            values[i].second = double(state.epoch_correct) / double(state.epoch_examples);
            return;
        }
}

/// Examples of consecutive batches, one after the other along axis 0 (a step's figures over all of them).
autodiff::Tensor stack(const std::vector<autodiff::Tensor>& parts) {
    if (parts.size() == 1) return parts[0];
    std::vector<autodiff::Tensor> wide;
    for (const autodiff::Tensor& p : parts) wide.push_back(p.to(autodiff::Dtype::float32));
    return autodiff::concat(wide, 0);
}

/// The step of fit with accumulate_steps > 1: its batches' gradients summed in float32, then averaged and
/// applied once.
class Accumulator {
  public:
    void add(const std::vector<autodiff::Tensor>& grads) {
        optim::accumulate_float32(sums_, grads, "fit");
        ++count_;
    }
    bool apply(optim::Optimizer& optimizer, const std::vector<Variable>& variables) {
        const float n = float(count_);
        for (std::vector<float>& g : sums_)
            for (float& v : g) v /= n;
        const bool applied = optimizer.apply_float32(sums_, variables);
        sums_.clear();
        count_ = 0;
        return applied;
    }

  private:
    std::vector<std::vector<float>> sums_;
    std::size_t count_ = 0;
};

} // namespace

namespace {

/// Examples of `data` kept for training by options.validation_split (all of them without one).
std::size_t training_examples(const Dataset& data, const FitOptions& options) {
    const double split = options.validation_split;
    if (!(split >= 0 && split < 1))
        throw std::invalid_argument("fit: validation_split must be in [0, 1), got " + std::to_string(split));
    if (split == 0) return data.size();
    if (options.validation) throw std::invalid_argument("fit: give validation data or a validation_split, not both");
    const auto kept = static_cast<std::size_t>(std::ceil(double(data.size()) * (1 - split)));
    if (kept == 0 || kept >= data.size())
        throw std::invalid_argument("fit: a validation_split of " + std::to_string(split) + " of " +
                                    std::to_string(data.size()) + " examples leaves " + std::to_string(kept) +
                                    " for training and " + std::to_string(data.size() - kept) + " for validation");
    return kept;
}

} // namespace

std::vector<EpochLogs> fit(Model& model, optim::Optimizer& optimizer, const Dataset& all_data, TrainingState& state,
                           const FitOptions& given) {
    const std::size_t kept = training_examples(all_data, given);
    const DatasetSlice train_part(all_data, 0, kept), held_out(all_data, kept, all_data.size() - kept);
    const Dataset& data = kept == all_data.size() ? all_data : train_part;
    FitOptions options = given; // with the held-out examples as validation data
    if (kept < all_data.size()) options.validation = &held_out;
    validate(options);
    check_fits(model, data, "fit");
    if (data.size() == 0) throw std::invalid_argument("fit: the dataset is empty");
    if (options.train_step && options.accumulate_steps > 1)
        throw std::invalid_argument("fit: accumulate_steps > 1 works with the default train step only; a "
                                    "replacement train_step accumulates itself");
    if (options.initial_epoch && *options.initial_epoch != state.epoch) {
        throw std::invalid_argument("fit: initial_epoch is " + std::to_string(*options.initial_epoch) +
                                    " but the training state is in epoch " + std::to_string(state.epoch) +
                                    " (epochs count from 0); leave initial_epoch unset to train `epochs` more");
    }
    const Objective objective = models::objective(options.loss, options.metrics);
    const std::int64_t target = options.initial_epoch ? options.epochs : state.epoch + options.epochs;

    const auto batches = static_cast<std::int64_t>((data.size() + options.batch_size - 1) / options.batch_size);
    FitContext context{model, optimizer, state, target};
    for (const CallbackRef& c : options.callbacks) c->on_train_begin(context); // may restore a saved state
    if (state.step == 0 && state.epoch == 0 && state.batch_in_epoch == 0) {    // a fresh run
        state.shuffle_rng.reseed(options.seed);
        state.dropout_rng.reseed(options.seed ^ 0x5deece66dull);
    }
    if (state.batch_in_epoch > batches) {
        throw std::invalid_argument("fit: the training state is at batch " + std::to_string(state.batch_in_epoch) +
                                    " of an epoch that has only " + std::to_string(batches) +
                                    " (a different dataset or batch size?)");
    }
    auto stop = [&] { return context.stop_requested || (options.max_steps > 0 && state.step >= options.max_steps); };

    const Ranks ranks(optimizer.communicator());
    std::vector<EpochLogs> history;
    autodiff::Tensor x, y;
    Accumulator accumulator;
    Totals epoch_totals;
    while (state.epoch < target && !stop()) {
        if (state.batch_in_epoch == 0) {
            state.epoch_loss_sum = 0;
            state.epoch_examples = 0;
            state.epoch_correct = 0;
        }
        // The figures of an epoch resumed in its middle count from the resume (the loss from its start).
        epoch_totals = {};
        for (const CallbackRef& c : options.callbacks) c->on_epoch_begin(context, state.epoch);
        Rng order_rng = state.shuffle_rng; // the order is drawn again, identically, after a resume
        std::vector<std::size_t> order;
        if (options.shuffle) {
            order = shuffled_order(data.size(), order_rng);
        } else {
            order.resize(data.size());
            std::iota(order.begin(), order.end(), std::size_t{0});
        }

        const auto start = Clock::now();
        std::int64_t examples_this_call = 0;
        while (state.batch_in_epoch < batches && !stop()) {
            StepLogs logs;
            logs.learning_rate = optimizer.current_learning_rate();
            logs.loss_scale = optimizer.current_loss_scale();
            const std::int64_t step_number = state.step + 1;
            // Read every step: a callback may freeze or unfreeze layers between steps.
            const std::vector<Variable> variables = model.trainable_variables();
            double loss_sum = 0;
            std::size_t count = 0, local_count = 0;
            std::vector<autodiff::Tensor> ys, y_preds;
            bool applied = true;
            std::optional<amp::StepTelemetry> telemetry;
            if (options.telemetry_every > 0 && step_number % options.telemetry_every == 0)
                telemetry.emplace(autodiff::RoundingRecorderOptions{.histogram = options.telemetry_histogram});
            // Data-parallel: one generator per rank and step, so that every rank's run state stays the same.
            Rng rank_dropout =
                ranks.size() > 1 ? Rng(autodiff::counter_bits(state.dropout_rng(), ranks.rank())) : Rng();
            for (std::int64_t k = 0; k < options.accumulate_steps && state.batch_in_epoch < batches; ++k) {
                const std::size_t begin = static_cast<std::size_t>(state.batch_in_epoch) * options.batch_size;
                const std::size_t n = std::min(options.batch_size, data.size() - begin);
                const Share share = ranks.share(n);
                // An empty share (a last batch with fewer examples than ranks) runs the batch's first example
                // with weight 0, so that the rank still takes part in every collective of the step.
                data.batch(std::span(order).subspan(begin + (share.size > 0 ? share.begin : 0),
                                                    std::max<std::size_t>(share.size, 1)),
                           x, y);
                const TrainStep step{model,
                                     optimizer,
                                     variables,
                                     x,
                                     y,
                                     objective.loss,
                                     step_number,
                                     ranks.size() > 1 ? rank_dropout : state.dropout_rng,
                                     options.gradient_hook ? &options.gradient_hook : nullptr,
                                     share.loss_weight};
                if (options.accumulate_steps == 1) {
                    TrainStepResult r = options.train_step ? options.train_step(step) : model.train_step(step);
                    loss_sum += r.loss * double(share.size);
                    if (share.size > 0) y_preds.push_back(std::move(r.y_pred));
                    applied = r.applied;
                } else {
                    BatchGradients g = batch_gradients(step);
                    if (options.gradient_hook) options.gradient_hook(step_number, g.grads);
                    accumulator.add(g.grads);
                    loss_sum += g.loss * double(share.size);
                    if (share.size > 0) y_preds.push_back(std::move(g.y_pred));
                }
                if (share.size > 0) ys.push_back(y);
                count += n;
                local_count += share.size;
                ++state.batch_in_epoch;
            }
            if (options.accumulate_steps > 1) applied = accumulator.apply(optimizer, variables);
            ++state.step;
            if (telemetry) {
                logs.telemetry = std::make_shared<const amp::Telemetry>(telemetry->result());
                telemetry.reset();
            }

            if (ranks.size() == 1) {
                logs.loss = loss_sum / double(count);
                logs.metrics = measure(objective.metrics, stack(ys), stack(y_preds));
            } else {
                Totals step_totals;
                step_totals.add(0, ys.empty() ? Metrics{} : measure(objective.metrics, stack(ys), stack(y_preds)),
                                double(local_count));
                step_totals.loss = loss_sum;
                ranks.sum(step_totals, objective.metrics.size());
                logs.loss = step_totals.mean_loss();
                logs.metrics = step_totals.means(objective.metrics);
                const bool last = (options.max_steps > 0 && state.step >= options.max_steps) ||
                                  (state.batch_in_epoch >= batches && state.epoch + 1 >= target);
                if (last || (options.rank_digest_every > 0 && state.step % options.rank_digest_every == 0))
                    logs.rank_digests = ranks.gather(state_digest(model.variables(), optimizer));
            }
            logs.accuracy = first_accuracy(objective.metrics, logs.metrics);
            logs.step = state.step;
            logs.epoch = state.epoch;
            logs.batch = state.batch_in_epoch;
            logs.batches_per_epoch = batches;
            logs.batch_size = count;
            logs.skipped = !applied;
            logs.gradient_norm = optimizer.last_gradient_norm();
            epoch_totals.add(logs.loss, logs.metrics, double(count));
            state.epoch_loss_sum += logs.loss * double(count);
            state.epoch_examples += static_cast<std::int64_t>(count);
            if (std::isfinite(logs.accuracy))
                state.epoch_correct += static_cast<std::int64_t>(std::llround(logs.accuracy * double(count)));
            examples_this_call += static_cast<std::int64_t>(count);
            for (const CallbackRef& c : options.callbacks) c->on_step_end(context, logs);
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        const EvaluateOptions evaluation{options.batch_size, objective.loss, objective.metrics, ranks.communicator()};
        if (state.batch_in_epoch < batches) { // stopped inside the epoch
            if (options.validation)
                context.validation_accuracy = evaluate(model, *options.validation, evaluation).accuracy;
            break;
        }

        EpochLogs logs;
        logs.epoch = state.epoch;
        logs.last_step = state.step;
        logs.train_loss = state.epoch_loss_sum / double(std::max<std::int64_t>(state.epoch_examples, 1));
        logs.metrics = epoch_totals.means(objective.metrics);
        resumed_accuracy(objective.metrics, state, epoch_totals, logs.metrics);
        logs.train_accuracy = first_accuracy(objective.metrics, logs.metrics);
        logs.seconds = seconds;
        logs.samples_per_second = seconds > 0 ? double(examples_this_call) / seconds : 0;
        if (options.validation) {
            const Evaluation e = evaluate(model, *options.validation, evaluation);
            logs.validation_loss = e.loss;
            logs.validation_metrics = e.metrics;
            logs.validation_accuracy = e.accuracy;
            if (std::isfinite(e.accuracy)) context.validation_accuracy = e.accuracy;
        }
        // The next epoch starts here: a checkpoint taken by on_epoch_end resumes with it.
        state.shuffle_rng = order_rng;
        state.batch_in_epoch = 0;
        ++state.epoch;
        history.push_back(logs);
        for (const CallbackRef& c : options.callbacks) c->on_epoch_end(context, logs);
    }
    const bool completed = state.epoch >= target;
    for (const CallbackRef& c : options.callbacks) c->on_train_end(context, completed);
    return history;
}

} // namespace mixprec::models
