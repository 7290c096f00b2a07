#include <mixprec/models/training/losses.hpp>

#include <mixprec/autodiff/ops_loss.hpp>

#include <cmath>
#include <stdexcept>

namespace mixprec::models {

namespace ad = autodiff;

std::vector<std::int32_t> class_indices(const ad::Tensor& y_true, std::string_view who) {
    const ad::Shape& shape = y_true.shape();
    if (!(shape.rank() == 1 || (shape.rank() == 2 && shape[1] == 1))) {
        std::string message(who);
        message += ": targets of shape " + shape.to_string() + " are not class indices; expected (batch) or (batch, 1)";
        throw ad::shape_error(message);
    }
    const std::vector<float> values = y_true.to_floats();
    std::vector<std::int32_t> labels(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        const float v = values[i];
        if (!(v >= 0 && v < 0x1p31f && v == std::floor(v))) {
            std::string message(who);
            message += ": target " + std::to_string(i) + " is " + std::to_string(v);
            message += ", not a class index (a whole number from 0); targets of shape " + shape.to_string();
            throw std::invalid_argument(message);
        }
        labels[i] = static_cast<std::int32_t>(v);
    }
    return labels;
}

Loss::Loss(std::string name, Function fn, AccuracyKind accuracy, bool from_logits)
    : name_(std::move(name)), fn_(std::move(fn)), accuracy_(accuracy), from_logits_(from_logits) {}

Loss::Loss(std::string name, Function fn) : name_(std::move(name)), fn_(std::move(fn)) {
    if (!fn_) throw std::invalid_argument("Loss '" + name_ + "': the function is empty");
    if (name_.empty()) throw std::invalid_argument("Loss: a custom loss needs a name (for logs and messages)");
}

Loss::Loss(std::string_view name) {
    if (name == "mean_squared_error" || name == "mse") {
        *this = mean_squared_error();
    } else if (name == "mean_absolute_error" || name == "mae") {
        *this = mean_absolute_error();
    } else if (name == "huber") {
        *this = huber();
    } else if (name == "binary_crossentropy") {
        *this = binary_crossentropy(true);
    } else if (name == "categorical_crossentropy") {
        *this = categorical_crossentropy(true);
    } else if (name == "sparse_categorical_crossentropy") {
        *this = sparse_categorical_crossentropy(true);
    } else {
        std::string message = "unknown loss '";
        message += name;
        message += "' (built in: mean_squared_error (mse), mean_absolute_error (mae), huber, binary_crossentropy, "
                   "categorical_crossentropy, sparse_categorical_crossentropy; or Loss(name, function))";
        throw std::invalid_argument(message);
    }
}

Loss Loss::mean_squared_error() {
    return {"mean_squared_error", [](const ad::Tensor& t, const ad::Tensor& p) { return ad::mean_squared_error(t, p); },
            AccuracyKind::none, false};
}

Loss Loss::mean_absolute_error() {
    return {"mean_absolute_error",
            [](const ad::Tensor& t, const ad::Tensor& p) { return ad::mean_absolute_error(t, p); }, AccuracyKind::none,
            false};
}

Loss Loss::huber(float delta) {
    if (!(delta > 0 && std::isfinite(delta)))
        throw std::invalid_argument("Loss::huber: delta must be finite and > 0, got " + std::to_string(delta));
    return {"huber", [delta](const ad::Tensor& t, const ad::Tensor& p) { return ad::huber(t, p, delta); },
            AccuracyKind::none, false};
}

Loss Loss::binary_crossentropy(bool from_logits) {
    return {
        "binary_crossentropy",
        [from_logits](const ad::Tensor& t, const ad::Tensor& p) { return ad::binary_crossentropy(t, p, from_logits); },
        AccuracyKind::binary, from_logits};
}

Loss Loss::categorical_crossentropy(bool from_logits) {
    return {"categorical_crossentropy",
            [from_logits](const ad::Tensor& t, const ad::Tensor& p) {
                return ad::categorical_crossentropy(t, p, from_logits);
            },
            AccuracyKind::categorical, from_logits};
}

Loss Loss::sparse_categorical_crossentropy(bool from_logits) {
    return {"sparse_categorical_crossentropy",
            [from_logits](const ad::Tensor& t, const ad::Tensor& p) {
                return ad::sparse_categorical_crossentropy(class_indices(t, "sparse_categorical_crossentropy"), p,
                                                           from_logits);
            },
            AccuracyKind::sparse, from_logits};
}

ad::Tensor Loss::operator()(const ad::Tensor& y_true, const ad::Tensor& y_pred) const {
    ad::Tensor loss = fn_(y_true, y_pred);
    if (loss.rank() != 0) {
        throw std::invalid_argument("loss '" + name_ + "' returned a tensor of shape " + loss.shape().to_string() +
                                    "; a loss returns a scalar (reduce it, e.g. with autodiff::mean)");
    }
    return loss;
}

} // namespace mixprec::models
