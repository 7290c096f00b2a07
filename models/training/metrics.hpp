#pragma once
/// Metric: a figure fit and evaluate report besides the loss, by Keras's name or as any function.
///
///   model.compile(opt, "sparse_categorical_crossentropy", {"accuracy", Metric::top_k(3)});
///   model.compile(opt, "mse", {"mae", Metric("max_error", [](const Tensor& t, const Tensor& p) { ... })});
///
/// A metric is logged under the name it was given ("mae" as "mae" and "val_mae", as Keras does); a
/// metric gives the mean of a batch; fit and evaluate weight each batch by its examples, so an epoch's
/// figure is the mean over its examples (Keras's Mean). Metrics are computed in double from the float32
/// values of y_pred, off the tape.
///
/// | name (and alias) | the batch's value |
/// |---|---|
/// | accuracy (acc) | as the loss reads it (below) |
/// | sparse_categorical_accuracy | fraction of rows whose largest y_pred (the first of equals) is at the class index |
/// | categorical_accuracy | fraction of rows whose largest y_pred is where y_true's largest is |
/// | binary_accuracy | fraction of elements with [y_pred > threshold] = y_true; threshold 0 for logits, 0.5 otherwise |
/// | sparse_top_k_categorical_accuracy | fraction of rows whose class is among the k = 5 largest (Metric::top_k) |
/// | top_k_categorical_accuracy | the same with one-hot y_true (Metric::top_k(k, false)) |
/// | mean_absolute_error (mae) | mean of abs(y_pred - y_true) |
/// | mean_squared_error (mse) | mean of (y_pred - y_true)² |
///
/// "accuracy" takes its meaning from the compiled loss, as in Keras: sparse_categorical_accuracy for
/// sparse_categorical_crossentropy, categorical_accuracy for categorical_crossentropy, binary_accuracy for
/// binary_crossentropy (at the threshold that fits its logits or probabilities); for a custom loss it is
/// decided from each batch's shapes (y_true one axis short: sparse; last axis of 1: binary at 0.5; else
/// categorical); for a loss that compares values (mse, mae, huber) compile refuses it. In the top-k
/// metrics a class counts as among the k largest unless k entries are strictly larger (ties count in);
/// a NaN prediction never does.

#include <mixprec/models/training/losses.hpp>

#include <functional>
#include <string>
#include <string_view>

namespace mixprec::models {

class Metric {
  public:
    /// Returns the batch's mean value of the metric.
    using Function = std::function<double(const autodiff::Tensor& y_true, const autodiff::Tensor& y_pred)>;

    /// A built-in metric by name (table above); std::invalid_argument listing the names otherwise.
    Metric(std::string_view name);
    Metric(const char* name) : Metric(std::string_view(name)) {}
    Metric(const std::string& name) : Metric(std::string_view(name)) {}
    /// A custom metric named `name` (for logs). std::invalid_argument if `fn` is empty.
    Metric(std::string name, Function fn);

    /// Sparse (class indices) or categorical (one-hot) top-k accuracy; k ≥ 1. Named as Keras names it.
    static Metric top_k(int k = 5, bool sparse = true);
    /// Binary accuracy at `threshold` (finite).
    static Metric binary_accuracy(double threshold = 0.5);

    const std::string& name() const { return name_; }
    /// Whether this is an accuracy: StepLogs::accuracy and EpochLogs' accuracies report the first one.
    bool is_accuracy() const { return accuracy_; }

    /// This metric as it reads under `loss` ("accuracy" takes its meaning from the loss; see above; a
    /// binary accuracy by name uses threshold 0 when the loss reads logits). std::invalid_argument for
    /// "accuracy" under a loss that compares values.
    Metric resolved_for(const Loss& loss) const;

    /// The batch's value. std::logic_error for "accuracy" not yet resolved for a loss.
    double operator()(const autodiff::Tensor& y_true, const autodiff::Tensor& y_pred) const;

  private:
    Metric(std::string name, Function fn, bool accuracy);

    std::string name_;
    Function fn_;
    bool accuracy_ = false;
    bool resolve_accuracy_ = false; ///< "accuracy" by name: resolved_for picks the function
    bool binary_by_name_ = false;   ///< "binary_accuracy" by name: the threshold follows the loss
};

} // namespace mixprec::models
