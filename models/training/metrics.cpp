#include <mixprec/models/training/metrics.hpp>

#include <cmath>
#include <stdexcept>

namespace mixprec::models {

namespace ad = autodiff;

namespace {

/// y_pred as rows of classes: (batch, classes) with batch ≥ 1 rows of the values.
struct Rows {
    std::vector<float> values;
    std::size_t rows = 0, width = 0;
    const float* row(std::size_t i) const { return values.data() + i * width; }
};

Rows rows_of(const ad::Tensor& y, std::string_view who) {
    if (y.rank() != 2 || y.shape()[0] == 0) {
        std::string message(who);
        message += ": expected predictions of shape (batch, classes), got " + y.shape().to_string();
        throw ad::shape_error(message);
    }
    return {y.to_floats(), y.shape()[0], y.shape()[1]};
}

void require_same_shape(const ad::Tensor& y_true, const ad::Tensor& y_pred, std::string_view who) {
    if (!(y_true.shape() == y_pred.shape()) || y_pred.size() == 0) {
        std::string message(who);
        message += ": y_true " + y_true.shape().to_string() + " and y_pred " + y_pred.shape().to_string();
        message += " must have the same non-empty shape";
        throw ad::shape_error(message);
    }
}

void check_rows(std::size_t labels, const Rows& p, std::string_view who) {
    if (labels != p.rows) {
        std::string message(who);
        message += ": " + std::to_string(labels) + " targets for " + std::to_string(p.rows) + " rows of predictions";
        throw ad::shape_error(message);
    }
}

/// Position of the largest entry (the first of equals); NaN entries never win.
std::size_t argmax(const float* row, std::size_t n) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < n; ++j)
        if (row[j] > row[best] || std::isnan(row[best])) best = j;
    return best;
}

/// Whether the entry at `k_of` is among the k largest: fewer than k entries are strictly larger.
bool in_top_k(const float* row, std::size_t n, std::size_t target, int k) {
    const float v = row[target];
    if (std::isnan(v)) return false;
    std::size_t larger = 0;
    for (std::size_t j = 0; j < n; ++j) larger += row[j] > v;
    return larger < static_cast<std::size_t>(k);
}

double sparse_accuracy(const ad::Tensor& y_true, const ad::Tensor& y_pred) {
    const Rows p = rows_of(y_pred, "sparse_categorical_accuracy");
    const std::vector<std::int32_t> labels = class_indices(y_true, "sparse_categorical_accuracy");
    check_rows(labels.size(), p, "sparse_categorical_accuracy");
    double correct = 0;
    for (std::size_t i = 0; i < p.rows; ++i) correct += argmax(p.row(i), p.width) == std::size_t(labels[i]);
    return correct / double(p.rows);
}

double categorical_accuracy(const ad::Tensor& y_true, const ad::Tensor& y_pred) {
    require_same_shape(y_true, y_pred, "categorical_accuracy");
    const Rows p = rows_of(y_pred, "categorical_accuracy"), t = rows_of(y_true, "categorical_accuracy");
    double correct = 0;
    for (std::size_t i = 0; i < p.rows; ++i) correct += argmax(p.row(i), p.width) == argmax(t.row(i), t.width);
    return correct / double(p.rows);
}

Metric::Function binary_accuracy_at(double threshold) {
    return [threshold](const ad::Tensor& y_true, const ad::Tensor& y_pred) {
        require_same_shape(y_true, y_pred, "binary_accuracy");
        const std::vector<float> t = y_true.to_floats(), p = y_pred.to_floats();
        double correct = 0;
        for (std::size_t i = 0; i < p.size(); ++i) correct += float(double(p[i]) > threshold) == t[i];
        return correct / double(p.size());
    };
}

Metric::Function top_k_at(int k, bool sparse) {
    return [k, sparse](const ad::Tensor& y_true, const ad::Tensor& y_pred) {
        const char* who = sparse ? "sparse_top_k_categorical_accuracy" : "top_k_categorical_accuracy";
        const Rows p = rows_of(y_pred, who);
        std::vector<std::size_t> targets;
        if (sparse) {
            for (std::int32_t label : class_indices(y_true, who)) targets.push_back(std::size_t(label));
        } else {
            require_same_shape(y_true, y_pred, who);
            const Rows t = rows_of(y_true, who);
            for (std::size_t i = 0; i < t.rows; ++i) targets.push_back(argmax(t.row(i), t.width));
        }
        check_rows(targets.size(), p, who);
        double correct = 0;
        for (std::size_t i = 0; i < p.rows; ++i)
            correct += targets[i] < p.width && in_top_k(p.row(i), p.width, targets[i], k);
        return correct / double(p.rows);
    };
}

/// mean of f(y_pred - y_true) over all elements.
template <class F>
Metric::Function elementwise_mean(const char* who, F f) {
    return [who, f](const ad::Tensor& y_true, const ad::Tensor& y_pred) {
        require_same_shape(y_true, y_pred, who);
        const std::vector<float> t = y_true.to_floats(), p = y_pred.to_floats();
        double sum = 0;
        for (std::size_t i = 0; i < p.size(); ++i) sum += f(double(p[i]) - double(t[i]));
        return sum / double(p.size());
    };
}

/// "accuracy" for a custom loss: decided from the shapes of the batch, as Keras does.
double accuracy_by_shape(const ad::Tensor& y_true, const ad::Tensor& y_pred) {
    if (y_true.rank() + 1 == y_pred.rank() ||
        (y_true.rank() == 2 && y_pred.rank() == 2 && y_true.shape()[1] == 1 && y_pred.shape()[1] > 1))
        return sparse_accuracy(y_true, y_pred);
    if (y_pred.rank() >= 1 && y_pred.shape()[y_pred.rank() - 1] == 1) return binary_accuracy_at(0.5)(y_true, y_pred);
    return categorical_accuracy(y_true, y_pred);
}

} // namespace

Metric::Metric(std::string name, Function fn, bool accuracy)
    : name_(std::move(name)), fn_(std::move(fn)), accuracy_(accuracy) {}

Metric::Metric(std::string name, Function fn) : name_(std::move(name)), fn_(std::move(fn)) {
    if (!fn_) throw std::invalid_argument("Metric '" + name_ + "': the function is empty");
    if (name_.empty()) throw std::invalid_argument("Metric: a custom metric needs a name (for logs)");
}

Metric::Metric(std::string_view name) {
    if (name == "accuracy" || name == "acc") {
        *this = Metric(std::string(name), nullptr, true);
        resolve_accuracy_ = true;
    } else if (name == "sparse_categorical_accuracy") {
        *this = Metric(std::string(name), sparse_accuracy, true);
    } else if (name == "categorical_accuracy") {
        *this = Metric(std::string(name), categorical_accuracy, true);
    } else if (name == "binary_accuracy") {
        *this = binary_accuracy(0.5);
        binary_by_name_ = true;
    } else if (name == "sparse_top_k_categorical_accuracy") {
        *this = top_k(5, true);
    } else if (name == "top_k_categorical_accuracy") {
        *this = top_k(5, false);
    } else if (name == "mean_absolute_error" || name == "mae") {
        *this = Metric(std::string(name), elementwise_mean("mean_absolute_error", [](double d) { return std::abs(d); }),
                       false);
    } else if (name == "mean_squared_error" || name == "mse") {
        *this =
            Metric(std::string(name), elementwise_mean("mean_squared_error", [](double d) { return d * d; }), false);
    } else {
        std::string message = "unknown metric '";
        message += name;
        message += "' (built in: accuracy (acc), sparse_categorical_accuracy, categorical_accuracy, binary_accuracy, "
                   "sparse_top_k_categorical_accuracy, top_k_categorical_accuracy, mean_absolute_error (mae), "
                   "mean_squared_error (mse); or Metric(name, function))";
        throw std::invalid_argument(message);
    }
}

Metric Metric::top_k(int k, bool sparse) {
    if (k < 1) throw std::invalid_argument("Metric::top_k: k must be at least 1, got " + std::to_string(k));
    std::string name = sparse ? "sparse_top_k_categorical_accuracy" : "top_k_categorical_accuracy";
    if (k != 5)
        name = sparse ? "sparse_top_" + std::to_string(k) + "_categorical_accuracy"
                      : "top_" + std::to_string(k) + "_categorical_accuracy";
    return Metric(std::move(name), top_k_at(k, sparse), false);
}

Metric Metric::binary_accuracy(double threshold) {
    if (!std::isfinite(threshold)) throw std::invalid_argument("Metric::binary_accuracy: the threshold must be finite");
    return Metric("binary_accuracy", binary_accuracy_at(threshold), true);
}

Metric Metric::resolved_for(const Loss& loss) const {
    if (binary_by_name_ && loss.from_logits()) return Metric("binary_accuracy", binary_accuracy_at(0.0), true);
    if (!resolve_accuracy_) return *this;
    switch (loss.accuracy_kind()) {
    case AccuracyKind::sparse:
        return Metric(name_, sparse_accuracy, true);
    case AccuracyKind::categorical:
        return Metric(name_, categorical_accuracy, true);
    case AccuracyKind::binary:
        return Metric(name_, binary_accuracy_at(loss.from_logits() ? 0.0 : 0.5), true);
    case AccuracyKind::by_shape:
        return Metric(name_, accuracy_by_shape, true);
    case AccuracyKind::none:
        break;
    }
    throw std::invalid_argument("metric 'accuracy' has no meaning for the loss '" + loss.name() +
                                "', which compares values; report mean_absolute_error or mean_squared_error instead");
}

double Metric::operator()(const ad::Tensor& y_true, const ad::Tensor& y_pred) const {
    if (!fn_) throw std::logic_error("metric '" + name_ + "' is not resolved for a loss yet (Metric::resolved_for)");
    return fn_(y_true, y_pred);
}

} // namespace mixprec::models
