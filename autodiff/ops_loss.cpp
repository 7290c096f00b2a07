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
    check_same_shape(y_true, y_pred, "mean_squared_error (y_true, y_pred)");
    if (y_true.size() == 0)
        throw shape_error("mean_squared_error: shapes " + y_true.shape().to_string() + " hold no elements");
    const std::size_t n = y_true.size();
    const std::vector<float> t = y_true.to_floats();
    std::vector<float> sq = y_pred.to_floats();
    for (std::size_t i = 0; i < n; ++i) sq[i] = (sq[i] - t[i]) * (sq[i] - t[i]);
    Tensor loss = scalar(pairwise_sum(sq.data(), n) / static_cast<float>(n));
    if (should_record({&y_true, &y_pred}))
        record(loss, {&y_true, &y_pred}, [y_true, y_pred, n](const Tensor& dy) {
            const float c = 2.0f * dy.flat(0) / static_cast<float>(n);
            using kernels::detail::zip;
            return Gradients{zip(y_pred, y_true, y_true.dtype(), [c](float p, float t) { return -c * (p - t); }),
                             zip(y_pred, y_true, y_pred.dtype(), [c](float p, float t) { return c * (p - t); })};
        });
    return loss;
}

} // namespace mixprec::autodiff
