#include <mixprec/autodiff/ops_loss.hpp>

#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::autodiff {
namespace {

/// Pairwise float32 sum: error grows with log n, not n.
float pairwise_sum(const float* v, std::size_t n) {
    if (n <= 64) {
        float s = 0;
        for (std::size_t i = 0; i < n; ++i) s += v[i];
        return s;
    }
    return pairwise_sum(v, n / 2) + pairwise_sum(v + n / 2, n - n / 2);
}

Tensor scalar(float value) { return Tensor::from_floats(Shape{}, std::span<const float>(&value, 1)); }

void check_labels(std::span<const std::int32_t> labels, const Tensor& logits) {
    if (logits.rank() != 2 || logits.shape()[0] != labels.size() || labels.empty())
        throw shape_error("sparse_categorical_crossentropy: logits " + logits.shape().to_string() +
                          " must have shape (batch, classes) with batch = " + std::to_string(labels.size()) +
                          " labels, and batch > 0");
    const std::size_t classes = logits.shape()[1];
    for (std::size_t i = 0; i < labels.size(); ++i)
        if (labels[i] < 0 || static_cast<std::size_t>(labels[i]) >= classes)
            throw std::invalid_argument("sparse_categorical_crossentropy: label at index " + std::to_string(i) +
                                        " is " + std::to_string(labels[i]) + ", outside [0, " +
                                        std::to_string(classes) + ")");
}

/// shape_error naming both shapes unless they are equal and non-empty (and of rank 2 for a matrix loss).
void check_pair(const Tensor& y_true, const Tensor& y_pred, const char* op, bool matrix = false) {
    if (y_true.shape() != y_pred.shape() || y_true.size() == 0 || (matrix && y_true.rank() != 2))
        throw shape_error(std::string(op) + ": y_true " + y_true.shape().to_string() + " and y_pred " +
                          y_pred.shape().to_string() + " must have equal" + (matrix ? " (batch, classes)" : "") +
                          " non-empty shapes");
}

/// L = (1/n) Σ loss(t, p) over the elements of t = y_true and p = y_pred; backward
/// dL/dt = d_true(t, p) · dL/n and dL/dp = d_pred(t, p) · dL/n, each only when a tape wants it.
template <class Loss, class DTrue, class DPred>
Tensor elementwise_mean(const char* op, const Tensor& y_true, const Tensor& y_pred, Loss loss, DTrue d_true,
                        DPred d_pred) {
    check_pair(y_true, y_pred, op);
    const std::size_t n = y_true.size();
    const std::vector<float> t = y_true.to_floats();
    std::vector<float> terms = y_pred.to_floats();
    for (std::size_t i = 0; i < n; ++i) terms[i] = loss(t[i], terms[i]);
    Tensor out = scalar(pairwise_sum(terms.data(), n) / static_cast<float>(n));
    if (should_record({&y_true, &y_pred}))
        record(out, {&y_true, &y_pred}, [y_true, y_pred, n, d_true, d_pred](const Tensor& dy) {
            const float c = dy.flat(0) / static_cast<float>(n);
            using kernels::detail::zip;
            Gradients g(2);
            if (gradient_needed(0))
                g[0] = zip(y_true, y_pred, y_true.dtype(), [&](float t, float p) { return d_true(t, p) * c; });
            if (gradient_needed(1))
                g[1] = zip(y_true, y_pred, y_pred.dtype(), [&](float t, float p) { return d_pred(t, p) * c; });
            return g;
        });
    return out;
}

/// sign(d) with sign(0) = 0; NaN stays NaN.
float sign(float d) { return d > 0 ? 1.0f : d < 0 ? -1.0f : d; }

/// 1/(1 + e^(-z)), by the branch whose exponential cannot overflow.
float sigmoid(float z) {
    if (z >= 0) return 1.0f / (1.0f + std::exp(-z));
    const float e = std::exp(z);
    return e / (1.0f + e);
}

constexpr float probability_max = 1.0f - probability_epsilon; // the float32 1 - 2^-23

float clip(float p) { return std::clamp(p, probability_epsilon, probability_max); }
bool clipped(float p) { return p < probability_epsilon || p > probability_max; }

} // namespace

Tensor sparse_categorical_crossentropy(std::span<const std::int32_t> labels, const Tensor& logits, bool from_logits) {
    check_labels(labels, logits);
    const std::size_t batch = labels.size(), classes = logits.shape()[1];
    std::vector<float> p = logits.to_floats(); // softmax (from logits) or the probabilities themselves
    std::vector<float> losses(batch);
    for (std::size_t i = 0; i < batch; ++i) {
        float* row = p.data() + i * classes;
        const auto label = static_cast<std::size_t>(labels[i]);
        if (!from_logits) {
            losses[i] = -std::log(std::max(row[label], probability_epsilon));
            continue;
        }
        const float m = *std::max_element(row, row + classes);
        const float z = row[label];
        for (std::size_t j = 0; j < classes; ++j) row[j] = std::exp(row[j] - m);
        const float sum = pairwise_sum(row, classes);
        losses[i] = m + std::log(sum) - z;
        for (std::size_t j = 0; j < classes; ++j) row[j] /= sum;
    }
    Tensor loss = scalar(pairwise_sum(losses.data(), batch) / static_cast<float>(batch));
    if (should_record({&logits}))
        record(loss, {&logits},
               [p = std::move(p), labels = std::vector<std::int32_t>(labels.begin(), labels.end()),
                shape = logits.shape(), dtype = logits.dtype(), from_logits](const Tensor& dy) {
                   const std::size_t batch = labels.size(), classes = shape[1];
                   const float c = dy.flat(0) / static_cast<float>(batch);
                   std::vector<float> g(p.size(), 0.0f);
                   for (std::size_t i = 0; i < batch; ++i) {
                       const std::size_t at = i * classes + static_cast<std::size_t>(labels[i]);
                       if (from_logits) {
                           for (std::size_t j = 0; j < classes; ++j) g[i * classes + j] = p[i * classes + j] * c;
                           g[at] = (p[at] - 1.0f) * c;
                       } else if (p[at] > probability_epsilon) {
                           g[at] = -c / p[at];
                       }
                   }
                   return Gradients{Tensor::from_floats(shape, g, dtype)};
               });
    return loss;
}

Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred) {
    return elementwise_mean(
        "mean_squared_error", y_true, y_pred, [](float t, float p) { return (p - t) * (p - t); },
        [](float t, float p) { return -2.0f * (p - t); }, [](float t, float p) { return 2.0f * (p - t); });
}

Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred) {
    return elementwise_mean(
        "mean_absolute_error", y_true, y_pred, [](float t, float p) { return std::abs(p - t); },
        [](float t, float p) { return -sign(p - t); }, [](float t, float p) { return sign(p - t); });
}

Tensor huber(const Tensor& y_true, const Tensor& y_pred, float delta) {
    if (!(delta > 0) || !std::isfinite(delta))
        throw std::invalid_argument("huber: delta is " + std::to_string(delta) + ", must be positive and finite");
    const auto slope = [delta](float d) { return std::abs(d) <= delta ? d : delta * sign(d); };
    return elementwise_mean(
        "huber", y_true, y_pred,
        [delta](float t, float p) {
            const float d = std::abs(p - t);
            return d <= delta ? 0.5f * d * d : delta * (d - 0.5f * delta);
        },
        [slope](float t, float p) { return -slope(p - t); }, [slope](float t, float p) { return slope(p - t); });
}

Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits) {
    if (from_logits)
        return elementwise_mean(
            "binary_crossentropy", y_true, y_pred,
            [](float y, float z) { return std::max(z, 0.0f) - z * y + std::log1p(std::exp(-std::abs(z))); },
            [](float, float z) { return -z; }, [](float y, float z) { return sigmoid(z) - y; });
    return elementwise_mean(
        "binary_crossentropy", y_true, y_pred,
        [](float y, float p) {
            const float q = clip(p);
            return -(y * std::log(q) + (1.0f - y) * std::log1p(-q));
        },
        [](float, float p) { return std::log1p(-clip(p)) - std::log(clip(p)); },
        [](float y, float p) { return clipped(p) ? 0.0f : (p - y) / (p * (1.0f - p)); });
}

Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits) {
    check_pair(y_true, y_pred, "categorical_crossentropy", true);
    const std::size_t batch = y_pred.shape()[0], classes = y_pred.shape()[1];
    std::vector<float> y = y_true.to_floats();
    std::vector<float> q = y_pred.to_floats(); // becomes softmax(z), or the renormalized probabilities r
    std::vector<float> log_q(q.size()), sums(batch), terms(q.size());
    for (std::size_t i = 0; i < batch; ++i) {
        float* row = q.data() + i * classes;
        float* log_row = log_q.data() + i * classes;
        if (from_logits) {
            const float m = *std::max_element(row, row + classes);
            for (std::size_t j = 0; j < classes; ++j) {
                log_row[j] = row[j] - m;
                row[j] = std::exp(log_row[j]);
            }
            const float s = pairwise_sum(row, classes), log_s = std::log(s);
            for (std::size_t j = 0; j < classes; ++j) {
                log_row[j] -= log_s;
                row[j] /= s;
            }
        } else {
            sums[i] = pairwise_sum(row, classes);
            for (std::size_t j = 0; j < classes; ++j) {
                row[j] /= sums[i];
                log_row[j] = std::log(clip(row[j]));
            }
        }
    }
    for (std::size_t k = 0; k < terms.size(); ++k) terms[k] = -y[k] * log_q[k];
    Tensor loss = scalar(pairwise_sum(terms.data(), terms.size()) / static_cast<float>(batch));
    if (should_record({&y_true, &y_pred}))
        record(loss, {&y_true, &y_pred},
               [y = std::move(y), q = std::move(q), log_q = std::move(log_q), sums = std::move(sums),
                shape = y_pred.shape(), true_dtype = y_true.dtype(), pred_dtype = y_pred.dtype(),
                from_logits](const Tensor& dy) {
                   const std::size_t batch = shape[0], classes = shape[1];
                   const float c = dy.flat(0) / static_cast<float>(batch);
                   std::vector<float> g(y.size());
                   Gradients out(2);
                   if (gradient_needed(0)) {
                       for (std::size_t k = 0; k < g.size(); ++k) g[k] = -log_q[k] * c;
                       out[0] = Tensor::from_floats(shape, g, true_dtype);
                   }
                   if (!gradient_needed(1)) return out;
                   for (std::size_t i = 0; i < batch; ++i) {
                       const std::size_t at = i * classes;
                       if (from_logits) {
                           const float sum_y = pairwise_sum(y.data() + at, classes);
                           for (std::size_t j = at; j < at + classes; ++j) g[j] = (q[j] * sum_y - y[j]) * c;
                           continue;
                       }
                       float kept = 0.0f; // Σ y over the entries the clip left alone
                       for (std::size_t j = at; j < at + classes; ++j) kept += clipped(q[j]) ? 0.0f : y[j];
                       for (std::size_t j = at; j < at + classes; ++j)
                           g[j] = (kept - (clipped(q[j]) ? 0.0f : y[j] / q[j])) / sums[i] * c;
                   }
                   out[1] = Tensor::from_floats(shape, g, pred_dtype);
                   return out;
               });
    return loss;
}

} // namespace mixprec::autodiff
