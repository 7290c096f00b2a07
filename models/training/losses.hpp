#pragma once
/// Loss: what compile and fit minimize, by Keras's name or as any function of (y_true, y_pred).
///
///   model.compile(opt, "mean_squared_error", {"mae"});                        // by name
///   model.compile(opt, Loss::binary_crossentropy(/*from_logits=*/false));   // probabilities in y_pred
///   model.compile(opt, Loss("my_loss", [](const Tensor& y_true, const Tensor& y_pred) {
///       return autodiff::mean(autodiff::square(autodiff::sub(y_pred, y_true)));  // any float32 scalar
///   }));
///
/// Every built-in loss is the mean over the batch, reduced in float32 whatever the dtype of y_pred
/// (autodiff/ops_loss.hpp has the formulas and gradients). y_true is float32 (batch, ...) as a Dataset
/// gives it; class labels are their indices, held exactly.
///
/// | name (and alias) | y_true | y_pred |
/// |---|---|---|
/// | mean_squared_error (mse) | any values, y_pred's shape | any |
/// | mean_absolute_error (mae) | any values, y_pred's shape | any |
/// | huber | any values, y_pred's shape | any; δ = 1 by name, Loss::huber(δ) otherwise |
/// | binary_crossentropy | 0 … 1, y_pred's shape | logits (by name); Loss::binary_crossentropy(false) for probabilities |
/// | categorical_crossentropy | (batch, classes), one-hot or soft | logits (by name), or probabilities |
/// | sparse_categorical_crossentropy | (batch) or (batch, 1) class indices | (batch, classes) logits (by name), or probabilities |
///
/// By name, the cross-entropies read y_pred as **logits**: mixprec's layers end without an activation
/// unless asked, and the logits form is the numerically stable one. (Keras's names mean probabilities;
/// compile refuses a cross-entropy on logits for a model whose last layer ends in softmax or sigmoid, so
/// the two cannot be mixed up silently.)

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::models {

/// How Keras's "accuracy" metric reads under a loss (compile resolves it from the loss).
enum class AccuracyKind {
    none,        ///< the loss compares values: "accuracy" has no meaning (compile refuses it)
    sparse,      ///< argmax of y_pred against the class index in y_true
    categorical, ///< argmax of y_pred against argmax of y_true
    binary,      ///< y_pred above the threshold (0 for logits, 0.5 for probabilities) against y_true
    by_shape,    ///< a custom loss: decided from the shapes of each batch, as Keras does
};

class Loss {
  public:
    /// Returns the loss of a batch as a float32 scalar (rank 0), recorded on the tape.
    using Function = std::function<autodiff::Tensor(const autodiff::Tensor& y_true, const autodiff::Tensor& y_pred)>;

    /// A built-in loss by name (table above); std::invalid_argument listing the names otherwise.
    Loss(std::string_view name);
    Loss(const char* name) : Loss(std::string_view(name)) {}
    Loss(const std::string& name) : Loss(std::string_view(name)) {}
    /// A custom loss named `name` (for logs and messages). std::invalid_argument if `fn` is empty.
    Loss(std::string name, Function fn);

    static Loss mean_squared_error();
    static Loss mean_absolute_error();
    static Loss huber(float delta = 1.0f); ///< δ > 0 and finite
    static Loss binary_crossentropy(bool from_logits);
    static Loss categorical_crossentropy(bool from_logits);
    static Loss sparse_categorical_crossentropy(bool from_logits);

    const std::string& name() const { return name_; }
    /// Whether y_pred is read as logits (a built-in cross-entropy from logits); false otherwise.
    bool from_logits() const { return from_logits_; }
    AccuracyKind accuracy_kind() const { return accuracy_; }

    /// The batch's loss. std::invalid_argument naming the loss when a custom one returns anything but a
    /// scalar; the built-ins' shape errors name both shapes.
    autodiff::Tensor operator()(const autodiff::Tensor& y_true, const autodiff::Tensor& y_pred) const;

  private:
    Loss(std::string name, Function fn, AccuracyKind accuracy, bool from_logits);

    std::string name_;
    Function fn_;
    AccuracyKind accuracy_ = AccuracyKind::by_shape;
    bool from_logits_ = false;
};

/// Class indices from targets (batch) or (batch, 1) holding whole numbers in [0, 2^31): for sparse
/// losses and metrics. std::invalid_argument naming the first element that is not one, and the shape.
std::vector<std::int32_t> class_indices(const autodiff::Tensor& y_true, std::string_view who);

} // namespace mixprec::models
