#include <mixprec/models/training/fit.hpp>

#include <mixprec/autodiff/ops_loss.hpp>
#include <mixprec/autodiff/tape.hpp>
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

void check_fits(const Sequential& model, const Dataset& data, const char* what) {
    if (!model.built()) throw std::logic_error(std::string(what) + ": build the model first");
    if (!(data.example_shape() == model.input_shape())) {
        std::string message = what;
        message += ": the dataset's examples have shape " + data.example_shape().to_string();
        message += " but the model was built for " + model.input_shape().to_string();
        throw autodiff::shape_error(message);
    }
}

void validate(const FitOptions& options) {
    if (options.epochs < 1) throw std::invalid_argument("fit: epochs must be at least 1");
    if (options.batch_size < 1) throw std::invalid_argument("fit: batch_size must be at least 1");
    if (options.max_steps < 0) throw std::invalid_argument("fit: max_steps must not be negative");
    for (const Callback* c : options.callbacks)
        if (!c) throw std::invalid_argument("fit: a callback is null");
}

/// Runs `body(batch index, indices)` over `data` in order, in batches.
template <class Body>
void for_each_batch(const Dataset& data, std::size_t batch_size, Body&& body) {
    if (batch_size < 1) throw std::invalid_argument("batch_size must be at least 1");
    std::vector<std::size_t> indices;
    for (std::size_t begin = 0; begin < data.size(); begin += batch_size) {
        indices.resize(std::min(batch_size, data.size() - begin));
        std::iota(indices.begin(), indices.end(), begin);
        body(indices);
    }
}

/// Rows of `logits` (batch, classes) whose largest entry (the first of equals) is at the label.
std::size_t count_correct(const autodiff::Tensor& logits, std::span<const std::int32_t> labels) {
    if (logits.rank() != 2 || logits.shape()[0] != labels.size()) {
        std::string message = "accuracy: logits of shape " + logits.shape().to_string();
        message += " do not fit " + std::to_string(labels.size()) + " labels";
        throw autodiff::shape_error(message);
    }
    const std::vector<float> values = logits.to_floats();
    const std::size_t classes = logits.shape()[1];
    std::size_t correct = 0;
    for (std::size_t i = 0; i < labels.size(); ++i) {
        const float* row = values.data() + i * classes;
        correct += std::max_element(row, row + classes) - row == labels[i];
    }
    return correct;
}

} // namespace

std::vector<std::size_t> shuffled_order(std::size_t n, Rng& rng) {
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    return order;
}

double accuracy(const autodiff::Tensor& logits, std::span<const std::int32_t> labels) {
    const std::size_t correct = count_correct(logits, labels);
    return labels.empty() ? 0.0 : double(correct) / double(labels.size());
}

std::string weights_digest(const std::vector<autodiff::Variable>& variables) {
    std::uint64_t hash = 0xcbf29ce484222325ull; // FNV-1a, 64 bits
    for (const autodiff::Variable& v : variables) {
        const auto* bytes = static_cast<const unsigned char*>(v.value().raw());
        for (std::size_t i = 0; i < v.value().nbytes(); ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
    }
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
    return text;
}

TrainStepResult train_step(const TrainStep& s, const GradientHook& hook) {
    TrainStepResult result;
    std::vector<autodiff::Tensor> grads;
    {
        autodiff::GradientTape tape;
        result.logits = s.model(s.x, {.training = true, .dropout_rng = &s.dropout_rng});
        const autodiff::Tensor loss = autodiff::sparse_categorical_crossentropy(s.labels, result.logits, true);
        result.loss = loss.flat(0);
        grads = tape.gradient(s.optimizer.scale_loss(loss), s.variables);
    }
    if (hook) hook(s.step, grads);
    result.applied = s.optimizer.apply(grads, s.variables);
    return result;
}

std::vector<EpochLogs> fit(Sequential& model, optim::Optimizer& optimizer, const Dataset& data, TrainingState& state,
                           const FitOptions& options) {
    validate(options);
    check_fits(model, data, "fit");
    if (data.size() == 0) throw std::invalid_argument("fit: the dataset is empty");

    const std::vector<Variable> variables = model.trainable_variables();
    const auto batches = static_cast<std::int64_t>((data.size() + options.batch_size - 1) / options.batch_size);
    FitContext context{model, optimizer, state, options.epochs};
    for (Callback* c : options.callbacks) c->on_train_begin(context);       // may restore a saved state
    if (state.step == 0 && state.epoch == 0 && state.batch_in_epoch == 0) { // a fresh run
        state.shuffle_rng.reseed(options.seed);
        state.dropout_rng.reseed(options.seed ^ 0x5deece66dull);
    }
    if (state.batch_in_epoch > batches) {
        throw std::invalid_argument("fit: the training state is at batch " + std::to_string(state.batch_in_epoch) +
                                    " of an epoch that has only " + std::to_string(batches) +
                                    " (a different dataset or batch size?)");
    }
    auto stop = [&] { return context.stop_requested || (options.max_steps > 0 && state.step >= options.max_steps); };

    std::vector<EpochLogs> history;
    autodiff::Tensor x;
    std::vector<std::int32_t> labels;
    while (state.epoch < options.epochs && !stop()) {
        if (state.batch_in_epoch == 0) {
            state.epoch_loss_sum = 0;
            state.epoch_examples = 0;
            state.epoch_correct = 0;
        }
        for (Callback* c : options.callbacks) c->on_epoch_begin(context, state.epoch);
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
            const std::size_t begin = static_cast<std::size_t>(state.batch_in_epoch) * options.batch_size;
            const std::size_t count = std::min(options.batch_size, data.size() - begin);
            data.batch(std::span(order).subspan(begin, count), x, labels);

            StepLogs logs;
            logs.learning_rate = optimizer.current_learning_rate();
            logs.loss_scale = optimizer.current_loss_scale();
            const TrainStep step{model, optimizer, variables, x, labels, state.step + 1, state.dropout_rng};
            const TrainStepResult result =
                options.train_step ? options.train_step(step) : train_step(step, options.gradient_hook);
            ++state.step;
            ++state.batch_in_epoch;
            logs.loss = result.loss;

            logs.step = state.step;
            logs.epoch = state.epoch;
            logs.batch = state.batch_in_epoch;
            logs.batches_per_epoch = batches;
            logs.batch_size = count;
            const std::size_t correct = count_correct(result.logits, labels);
            logs.accuracy = double(correct) / double(count);
            logs.skipped = !result.applied;
            logs.gradient_norm = optimizer.last_gradient_norm();
            state.epoch_loss_sum += logs.loss * double(count);
            state.epoch_examples += static_cast<std::int64_t>(count);
            state.epoch_correct += static_cast<std::int64_t>(correct);
            examples_this_call += static_cast<std::int64_t>(count);
            for (Callback* c : options.callbacks) c->on_step_end(context, logs);
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        if (state.batch_in_epoch < batches) { // stopped inside the epoch
            if (options.validation)
                context.validation_accuracy = evaluate(model, *options.validation, options.batch_size).accuracy;
            break;
        }

        EpochLogs logs;
        logs.epoch = state.epoch;
        logs.last_step = state.step;
        logs.train_loss = state.epoch_loss_sum / double(std::max<std::int64_t>(state.epoch_examples, 1));
        logs.train_accuracy = double(state.epoch_correct) / double(std::max<std::int64_t>(state.epoch_examples, 1));
        logs.seconds = seconds;
        logs.samples_per_second = seconds > 0 ? double(examples_this_call) / seconds : 0;
        if (options.validation) {
            const Evaluation e = evaluate(model, *options.validation, options.batch_size);
            logs.validation_loss = e.loss;
            logs.validation_accuracy = context.validation_accuracy = e.accuracy;
        }
        // The next epoch starts here: a checkpoint taken by on_epoch_end resumes with it.
        state.shuffle_rng = order_rng;
        state.batch_in_epoch = 0;
        ++state.epoch;
        history.push_back(logs);
        for (Callback* c : options.callbacks) c->on_epoch_end(context, logs);
    }
    const bool completed = state.epoch >= options.epochs;
    for (Callback* c : options.callbacks) c->on_train_end(context, completed);
    return history;
}

Evaluation evaluate(Sequential& model, const Dataset& data, std::size_t batch_size) {
    check_fits(model, data, "evaluate");
    double loss_sum = 0, correct = 0; // correct: a count
    autodiff::Tensor x;
    std::vector<std::int32_t> labels;
    for_each_batch(data, batch_size, [&](std::span<const std::size_t> indices) {
        data.batch(indices, x, labels);
        const autodiff::Tensor logits = model(x);
        const double n = double(indices.size());
        loss_sum += double(autodiff::sparse_categorical_crossentropy(labels, logits, true).flat(0)) * n;
        correct += double(count_correct(logits, labels));
    });
    const double n = double(std::max<std::size_t>(data.size(), 1));
    return {loss_sum / n, correct / n};
}

autodiff::Tensor predict(Sequential& model, const Dataset& data, std::size_t batch_size) {
    check_fits(model, data, "predict");
    const Shape out = model.output_shape();
    if (out.rank() != 1) {
        std::string message = "predict: the model's examples come out with shape " + out.to_string();
        message += "; predict returns (examples, classes) logits";
        throw autodiff::shape_error(message);
    }
    autodiff::Tensor result(Shape{data.size(), out[0]});
    std::span<float> values = result.data<float>();
    std::size_t written = 0;
    autodiff::Tensor x;
    std::vector<std::int32_t> labels;
    for_each_batch(data, batch_size, [&](std::span<const std::size_t> indices) {
        data.batch(indices, x, labels);
        const std::vector<float> logits = model(x).to_floats();
        std::copy(logits.begin(), logits.end(), values.begin() + static_cast<std::ptrdiff_t>(written));
        written += logits.size();
    });
    return result;
}

void Sequential::compile(optim::Optimizer& optimizer, std::string_view loss, std::vector<std::string> metrics) {
    if (loss != "sparse_categorical_crossentropy") {
        std::string message = "compile: unknown loss '";
        message += loss;
        message += "' (supported: sparse_categorical_crossentropy, on logits)";
        throw std::invalid_argument(message);
    }
    for (const std::string& m : metrics)
        if (m != "accuracy") throw std::invalid_argument("compile: unknown metric '" + m + "' (supported: accuracy)");
    optimizer_ = &optimizer;
}

std::vector<EpochLogs> Sequential::fit(const Dataset& data, const FitOptions& options) {
    if (!optimizer_) throw std::logic_error("fit: compile the model with an optimizer first");
    return models::fit(*this, *optimizer_, data, state_, options);
}

Evaluation Sequential::evaluate(const Dataset& data, std::size_t batch_size) {
    return models::evaluate(*this, data, batch_size);
}

Tensor Sequential::predict(const Dataset& data, std::size_t batch_size) {
    return models::predict(*this, data, batch_size);
}

} // namespace mixprec::models
