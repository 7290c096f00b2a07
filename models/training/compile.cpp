// The loss and metrics a model is trained and judged by: objective(), evaluate, predict, and
// Model's compile, fit, evaluate and predict (see fit.hpp and model.hpp).

#include <mixprec/models/training/fit.hpp>

#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/training/detail/figures.hpp>
#include <mixprec/optim/optimizer.hpp>

#include <stdexcept>

namespace mixprec::models {

using detail::check_fits;
using detail::first_accuracy;
using detail::for_each_batch;
using detail::measure;
using detail::Totals;

namespace {

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

double accuracy(const autodiff::Tensor& logits, std::span<const std::int32_t> labels) {
    const std::size_t correct = count_correct(logits, labels);
    return labels.empty() ? 0.0 : double(correct) / double(labels.size());
}

Objective objective(const std::optional<Loss>& loss, const std::optional<std::vector<Metric>>& metrics) {
    Objective o{loss.value_or(Loss::sparse_categorical_crossentropy(true)), {}};
    for (const Metric& m : metrics.value_or(std::vector<Metric>{"accuracy"})) {
        Metric resolved = m.resolved_for(o.loss);
        for (const Metric& seen : o.metrics)
            if (seen.name() == resolved.name())
                throw std::invalid_argument("metric '" + seen.name() + "' is asked for twice");
        o.metrics.push_back(std::move(resolved));
    }
    return o;
}

Evaluation evaluate(Model& model, const Dataset& data, const EvaluateOptions& options) {
    check_fits(model, data, "evaluate");
    const Objective objective = models::objective(options.loss, options.metrics);
    Totals totals;
    autodiff::Tensor x, y;
    const detail::Ranks ranks(options.communicator);
    const detail::Share share = ranks.share(data.size());
    const DatasetSlice mine(data, share.begin, share.size);
    const Dataset& part = ranks.size() > 1 ? static_cast<const Dataset&>(mine) : data;
    for_each_batch(part, options.batch_size, [&](std::span<const std::size_t> indices) {
        part.batch(indices, x, y);
        const autodiff::Tensor y_pred = model(x);
        totals.add(double(objective.loss(y, y_pred).flat(0)), measure(objective.metrics, y, y_pred),
                   double(indices.size()));
    });
    ranks.sum(totals, objective.metrics.size());
    Evaluation e{totals.mean_loss(), 0, totals.means(objective.metrics)};
    e.accuracy = first_accuracy(objective.metrics, e.metrics);
    return e;
}

Evaluation evaluate(Model& model, const Dataset& data, std::size_t batch_size) {
    return evaluate(model, data, EvaluateOptions{.batch_size = batch_size});
}

autodiff::Tensor predict(Model& model, const Dataset& data, std::size_t batch_size) {
    check_fits(model, data, "predict");
    const Shape out = model.output_shape();
    std::vector<std::size_t> dims{data.size()};
    dims.insert(dims.end(), out.begin(), out.end());
    autodiff::Tensor result{Shape(std::span<const std::size_t>(dims))};
    std::span<float> values = result.data<float>();
    std::size_t written = 0;
    autodiff::Tensor x;
    for_each_batch(data, batch_size, [&](std::span<const std::size_t> indices) {
        autodiff::Tensor y;
        data.batch(indices, x, y);
        const std::vector<float> outputs = model(x).to_floats();
        std::copy(outputs.begin(), outputs.end(), values.begin() + static_cast<std::ptrdiff_t>(written));
        written += outputs.size();
    });
    return result;
}

namespace {

/// Whether the model is a Sequential whose last layer ends in softmax or sigmoid (its outputs are
/// probabilities). Another model's output layer is whichever call() returns from: not known here.
bool ends_in_probabilities(const Model& model) {
    if (!dynamic_cast<const Sequential*>(&model) || model.layers().empty()) return false;
    const Layer& last = *model.layers().back();
    std::string activation;
    if (const auto* dense = dynamic_cast<const Dense*>(&last)) activation = dense->activation();
    if (const auto* act = dynamic_cast<const Activation*>(&last)) activation = act->activation();
    return activation == "softmax" || activation == "sigmoid";
}

} // namespace

void Model::compile(std::shared_ptr<optim::Optimizer> optimizer, Loss loss, std::vector<Metric> metrics) {
    if (!optimizer) throw std::invalid_argument("compile: the optimizer is null");
    if (loss.from_logits() && ends_in_probabilities(*this)) {
        throw std::invalid_argument("compile: the loss '" + loss.name() +
                                    "' reads logits, but the model's last layer ends in " +
                                    "softmax or sigmoid, so its outputs are probabilities; drop that activation, or "
                                    "pass Loss::" +
                                    loss.name() + "(/*from_logits=*/false)");
    }
    Objective o = objective(loss, metrics);
    optimizer_ = std::move(optimizer);
    loss_ = std::move(o.loss);
    metrics_ = std::move(o.metrics);
}

optim::Optimizer& Model::optimizer() const {
    if (!optimizer_) throw std::logic_error("model '" + name_ + "': optimizer() before compile");
    return *optimizer_;
}

const Loss& Model::loss() const {
    if (!loss_) throw std::logic_error("model '" + name_ + "': loss() before compile");
    return *loss_;
}

const std::vector<Metric>& Model::metrics() const {
    if (!loss_) throw std::logic_error("model '" + name_ + "': metrics() before compile");
    return metrics_;
}

std::vector<EpochLogs> Model::fit(const Dataset& data, const FitOptions& options) {
    if (!optimizer_) throw std::logic_error("fit: compile the model with an optimizer first");
    FitOptions with = options;
    if (!with.loss) with.loss = loss_;
    if (!with.metrics) with.metrics = metrics_;
    return models::fit(*this, *optimizer_, data, state_, with);
}

Evaluation Model::evaluate(const Dataset& data, std::size_t batch_size) {
    if (!loss_) return models::evaluate(*this, data, batch_size);
    return models::evaluate(*this, data, EvaluateOptions{batch_size, loss_, metrics_});
}

Tensor Model::predict(const Dataset& data, std::size_t batch_size) { return models::predict(*this, data, batch_size); }

} // namespace mixprec::models
