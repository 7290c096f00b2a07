#pragma once
// Internal to models/training/ (never installed): what fit and evaluate share — the check that a dataset
// fits the model, batches in order, and the sums behind an epoch's figures.

#include <mixprec/models/data/dataset.hpp>
#include <mixprec/models/training/callback.hpp>
#include <mixprec/models/training/metrics.hpp>
#include <mixprec/models/training/model.hpp>
#include <mixprec/optim/communicator.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::models::detail {

/// std::logic_error before build; shape_error naming both shapes when the examples do not fit the model.
inline void check_fits(const Model& model, const Dataset& data, const char* what) {
    if (!model.built()) throw std::logic_error(std::string(what) + ": build the model first");
    if (!(data.example_shape() == model.input_shape())) {
        std::string message = what;
        message += ": the dataset's examples have shape " + data.example_shape().to_string();
        message += " but the model was built for " + model.input_shape().to_string();
        throw autodiff::shape_error(message);
    }
}

/// Runs `body(indices)` over `data` in order, a batch at a time.
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

/// Sums of figures over examples: each batch's means weighted by its examples.
struct Totals {
    double loss = 0, examples = 0;
    std::vector<double> metrics;

    void add(double batch_loss, const Metrics& batch_metrics, double n) {
        loss += batch_loss * n;
        examples += n;
        metrics.resize(batch_metrics.size());
        for (std::size_t i = 0; i < batch_metrics.size(); ++i) metrics[i] += batch_metrics[i].second * n;
    }
    double mean_loss() const { return loss / std::max(examples, 1.0); }
    Metrics means(const std::vector<Metric>& names) const {
        Metrics out;
        for (std::size_t i = 0; i < names.size(); ++i)
            out.emplace_back(names[i].name(), i < metrics.size() ? metrics[i] / std::max(examples, 1.0) : 0.0);
        return out;
    }
};

/// Each metric's value on one batch.
inline Metrics measure(const std::vector<Metric>& metrics, const autodiff::Tensor& y, const autodiff::Tensor& y_pred) {
    Metrics out;
    for (const Metric& m : metrics) out.emplace_back(m.name(), m(y, y_pred));
    return out;
}

/// The first accuracy among the metrics, NaN without one.
inline double first_accuracy(const std::vector<Metric>& metrics, const Metrics& values) {
    for (std::size_t i = 0; i < metrics.size(); ++i)
        if (metrics[i].is_accuracy()) return values[i].second;
    return std::numeric_limits<double>::quiet_NaN();
}

/// One rank's part of a batch of n examples: [begin, begin + size) of it, and the weight of its loss.
struct Share {
    std::size_t begin = 0, size = 0;
    float loss_weight = 1; ///< size · ranks / n: 1 for equal shares, 0 for an empty one
};

/// The ranks fit and evaluate run on: those of a communicator, or this process alone.
class Ranks {
  public:
    explicit Ranks(optim::Communicator* communicator) : communicator_(communicator) {}
    int size() const { return communicator_ ? communicator_->size() : 1; }
    int rank() const { return communicator_ ? communicator_->rank() : 0; }
    optim::Communicator* communicator() const { return communicator_; }

    Share share(std::size_t n) const {
        if (size() == 1) return {0, n, 1.0f};
        const std::size_t begin = optim::share_begin(n, rank(), size());
        const std::size_t size = optim::share_begin(n, rank() + 1, this->size()) - begin;
        return {begin, size, static_cast<float>(double(size) * this->size() / double(n))};
    }
    /// Sums `totals` (of `metrics` figures) across the ranks.
    void sum(Totals& totals, std::size_t metrics) const {
        if (size() == 1) return;
        totals.metrics.resize(metrics);
        std::vector<double> values{totals.loss, totals.examples};
        values.insert(values.end(), totals.metrics.begin(), totals.metrics.end());
        communicator_->sum(values);
        totals.loss = values[0];
        totals.examples = values[1];
        std::copy(values.begin() + 2, values.end(), totals.metrics.begin());
    }
    std::vector<std::uint64_t> gather(std::uint64_t value) const {
        return communicator_ ? communicator_->gather(value) : std::vector<std::uint64_t>{value};
    }

  private:
    optim::Communicator* communicator_;
};

} // namespace mixprec::models::detail
