// models::Loss and models::Metric: names and aliases, custom functions, how "accuracy" resolves for each
// loss, the metrics' values by hand, and the refusals.
#define BOOST_TEST_MODULE losses_metrics
#include <boost/test/unit_test.hpp>

#include <mixprec/amp/loss_scale_optimizer.hpp>
#include <mixprec/amp/policy.hpp>
#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_reduce.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/training/fit.hpp>
#include <mixprec/models/training/losses.hpp>
#include <mixprec/models/training/metrics.hpp>
#include <mixprec/optim/adam.hpp>

#include "op_checks.hpp"

#include <cmath>

using namespace mixprec;
using autodiff::Shape;
using autodiff::Tensor;
using models::Loss;
using models::Metric;
using op_checks::throws_with;

namespace {

Tensor t(const Shape& shape, std::vector<float> values) { return Tensor::from_floats(shape, values); }

/// n examples of 4 features in [-1, 1) and targets made from them by `target` (one row of `width`).
template <class F>
models::TensorDataset examples(std::size_t n, std::size_t width, std::uint64_t seed, F target) {
    autodiff::Rng rng(seed);
    const std::size_t row = std::max<std::size_t>(width, 1); // width 0: one class index per example
    std::vector<float> x(n * 4), y(n * row);
    for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < 4; ++j) x[i * 4 + j] = 2 * rng.uniform() - 1;
        target(&x[i * 4], &y[i * row]);
    }
    const Shape y_shape = width == 0 ? Shape{n} : Shape{n, width};
    return models::TensorDataset(t(Shape{n, 4}, x), t(y_shape, y));
}

/// Trains a two-layer model whose last layer is `last` with `loss` for 8 epochs; returns the evaluated
/// loss before and after, and the final figures.
struct Trained {
    double before = 0, after = 0;
    models::Evaluation evaluation;
};

Trained train(models::Dense last, const models::Loss& loss, std::vector<models::Metric> metrics,
              const models::TensorDataset& data, bool loss_scaled = false) {
    models::Sequential model{models::Dense(16, "relu"), std::move(last)};
    model.build(Shape{4}, 3);
    std::shared_ptr<optim::Optimizer> opt = std::make_shared<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f});
    if (loss_scaled)
        opt = std::make_shared<amp::LossScaleOptimizer>(
            std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}));
    model.compile(opt, loss, std::move(metrics));
    Trained r;
    r.before = model.evaluate(data).loss;
    model.fit(data, {.epochs = 8, .batch_size = 32, .seed = 1});
    r.evaluation = model.evaluate(data);
    r.after = r.evaluation.loss;
    return r;
}

} // namespace

BOOST_AUTO_TEST_CASE(losses_by_name_and_alias) {
    const Tensor y = t(Shape{2, 2}, {0, 1, 2, 3}), p = t(Shape{2, 2}, {1, 1, 2, 1});
    // d = (1, 0, 0, -2): mse = 5/4, mae = 3/4, huber(δ=1) = (½ + 0 + 0 + 1.5)/4 = 1/2
    BOOST_TEST(Loss("mse")(y, p).flat(0) == 1.25f);
    BOOST_TEST(Loss("mean_squared_error").name() == "mean_squared_error");
    BOOST_TEST(Loss("mae")(y, p).flat(0) == 0.75f);
    BOOST_TEST(Loss("huber")(y, p).flat(0) == 0.5f);
    BOOST_TEST(Loss::huber(2.0f)(y, p).flat(0) == (0.5f + 2.0f) / 4); // ½d² for both: |d| ≤ 2
    for (const char* name : {"binary_crossentropy", "categorical_crossentropy", "sparse_categorical_crossentropy"}) {
        const Loss loss(name);
        BOOST_TEST(loss.from_logits(), name); // by name, cross-entropies read logits
        BOOST_TEST(loss.name() == name);
    }
    BOOST_TEST(!Loss::binary_crossentropy(false).from_logits());
    BOOST_TEST((throws_with<std::invalid_argument>(
        [] { Loss("mean_squared_logarithmic_error"); },
        {"unknown loss 'mean_squared_logarithmic_error'", "huber", "Loss(name, function)"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Loss::huber(0); }, {"delta", "> 0"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Loss::huber(NAN); }, {"delta"})));
}

// Sparse targets are float32 class indices: (batch) or (batch, 1), whole numbers from 0.
BOOST_AUTO_TEST_CASE(sparse_targets_are_class_indices) {
    const Tensor logits = Tensor::full(Shape{3, 4}, 1.0f);
    const Loss scce("sparse_categorical_crossentropy");
    BOOST_TEST(scce(t(Shape{3}, {0, 3, 2}), logits).flat(0) == std::log(4.0f), boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(scce(t(Shape{3, 1}, {0, 3, 2}), logits).flat(0) == std::log(4.0f), boost::test_tools::tolerance(1e-6f));
    BOOST_TEST((throws_with<std::invalid_argument>(
        [&] {
            scce(t(Shape{3}, {0, 1.5f, 2}), logits);
        },
        {"target 1 is 1.5", "class index"})));
    BOOST_TEST((throws_with<std::invalid_argument>([&] { scce(t(Shape{3}, {0, -1, 2}), logits); }, {"target 1"})));
    BOOST_TEST((throws_with<autodiff::shape_error>(
        [&] {
            scce(t(Shape{3, 2}, {0, 1, 2, 0, 1, 2}), logits);
        },
        {"(3, 2)", "not class indices"})));
}

BOOST_AUTO_TEST_CASE(custom_losses_must_return_a_scalar) {
    const Loss squares("sum_of_squares", [](const Tensor& y, const Tensor& p) {
        return autodiff::sum(autodiff::square(autodiff::sub(p, y)));
    });
    BOOST_TEST(squares.name() == "sum_of_squares");
    BOOST_TEST(squares(t(Shape{2}, {1, 2}), t(Shape{2}, {2, 4})).flat(0) == 5.0f);
    BOOST_TEST((squares.accuracy_kind() == models::AccuracyKind::by_shape));
    const Loss rows("per_row", [](const Tensor& y, const Tensor& p) { return autodiff::sub(p, y); });
    BOOST_TEST((throws_with<std::invalid_argument>(
        [&] {
            rows(t(Shape{2}, {1, 2}), t(Shape{2}, {2, 4}));
        },
        {"loss 'per_row'", "shape (2)", "scalar"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Loss("empty", nullptr); }, {"'empty'", "empty"})));
}

// Keras's "accuracy" reads as the loss does; under a loss that compares values it means nothing.
BOOST_AUTO_TEST_CASE(accuracy_resolves_from_the_loss) {
    const Metric accuracy("accuracy");
    BOOST_TEST(accuracy.is_accuracy());
    BOOST_TEST((throws_with<std::logic_error>(
        [&] {
            accuracy(Tensor(Shape{1}), Tensor(Shape{1, 2}));
        },
        {"not resolved"})));
    // Sparse: rows (0.1, 0.9, 0) → 1 and (2, 2, 1) → 0 (the first of equals), labels 1 and 1.
    const Tensor scores = t(Shape{2, 3}, {0.1f, 0.9f, 0, 2, 2, 1});
    BOOST_TEST(accuracy.resolved_for(Loss("sparse_categorical_crossentropy"))(t(Shape{2}, {1, 1}), scores) == 0.5);
    const Tensor one_hot = t(Shape{2, 3}, {0, 1, 0, 1, 0, 0});
    BOOST_TEST(accuracy.resolved_for(Loss("categorical_crossentropy"))(one_hot, scores) == 1.0);
    // Binary: logits threshold at 0, probabilities at 0.5.
    const Tensor labels = t(Shape{4, 1}, {1, 0, 1, 0}), outputs = t(Shape{4, 1}, {0.3f, -0.2f, 0.7f, -1});
    BOOST_TEST(accuracy.resolved_for(Loss("binary_crossentropy"))(labels, outputs) == 1.0);
    BOOST_TEST(accuracy.resolved_for(Loss::binary_crossentropy(false))(labels, outputs) == 0.75);
    BOOST_TEST(Metric("binary_accuracy").resolved_for(Loss("binary_crossentropy"))(labels, outputs) == 1.0);
    BOOST_TEST(Metric("binary_accuracy")(labels, outputs) == 0.75);
    for (const char* loss : {"mse", "mae", "huber"})
        BOOST_TEST((throws_with<std::invalid_argument>([&] { accuracy.resolved_for(Loss(loss)); },
                                                       {"'accuracy' has no meaning", "compares values"})));
    // A custom loss: decided by shapes.
    const Metric by_shape =
        Metric("acc").resolved_for(Loss("custom", [](const Tensor&, const Tensor& p) { return autodiff::mean(p); }));
    BOOST_TEST(by_shape(t(Shape{2}, {1, 1}), scores) == 0.5);
    BOOST_TEST(by_shape(one_hot, scores) == 1.0);
    BOOST_TEST(by_shape(labels, t(Shape{4, 1}, {0.7f, 0.2f, 0.6f, 0.9f})) == 0.75);
}

BOOST_AUTO_TEST_CASE(metric_values_by_hand) {
    // Row 0: label 2 has the 2nd largest score; row 1: label 0 ties for the largest with two others.
    const Tensor scores = t(Shape{2, 4}, {0.1f, 0.5f, 0.4f, 0.0f, 3, 3, 3, 1});
    const Tensor labels = t(Shape{2}, {2, 0});
    BOOST_TEST(Metric("sparse_categorical_accuracy")(labels, scores) == 0.5); // row 1: the first of equals
    BOOST_TEST(Metric::top_k(1)(labels, scores) == 0.5);                      // ties count in: row 1 is in
    BOOST_TEST(Metric::top_k(2)(labels, scores) == 1.0);
    BOOST_TEST(Metric::top_k(2).name() == "sparse_top_2_categorical_accuracy");
    BOOST_TEST(Metric("sparse_top_k_categorical_accuracy").name() == "sparse_top_k_categorical_accuracy");
    const Tensor one_hot = t(Shape{2, 4}, {0, 0, 1, 0, 0, 0, 0, 1});
    BOOST_TEST(Metric::top_k(2, false)(one_hot, scores) == 0.5); // row 1's class 3 has three larger entries
    BOOST_TEST(Metric("categorical_accuracy")(one_hot, scores) == 0.0);
    // A NaN score is never among the largest.
    BOOST_TEST(Metric::top_k(4)(labels, t(Shape{2, 4}, {0, 0, NAN, 0, 1, 0, 0, 0})) == 0.5);
    const Tensor y = t(Shape{2, 2}, {0, 1, 2, 3}), p = t(Shape{2, 2}, {1, 1, 2, 1});
    BOOST_TEST(Metric("mae")(y, p) == 0.75);
    BOOST_TEST(Metric("mean_squared_error")(y, p) == 1.25);
    BOOST_TEST(Metric("mse").name() == "mse"); // logged as the user named it, as in Keras
    BOOST_TEST(Metric("acc").resolved_for(Loss("sparse_categorical_crossentropy")).name() == "acc");
    const Metric largest("max_error", [](const Tensor& a, const Tensor& b) {
        return double(autodiff::max(autodiff::abs(autodiff::sub(a, b))).flat(0));
    });
    BOOST_TEST(largest(y, p) == 2.0);
    BOOST_TEST(!largest.is_accuracy());
}

BOOST_AUTO_TEST_CASE(metric_refusals_name_the_problem) {
    BOOST_TEST((throws_with<std::invalid_argument>([] { Metric("f1"); }, {"unknown metric 'f1'", "top_k"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Metric::top_k(0); }, {"k must be at least 1"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Metric::binary_accuracy(NAN); }, {"threshold"})));
    BOOST_TEST((throws_with<autodiff::shape_error>(
        [] {
            Metric("mae")(Tensor(Shape{2, 2}), Tensor(Shape{2, 3}));
        },
        {"(2, 2)", "(2, 3)"})));
    BOOST_TEST((throws_with<autodiff::shape_error>(
        [] {
            Metric("sparse_categorical_accuracy")(Tensor(Shape{3}), Tensor(Shape{2, 3}));
        },
        {"3 targets", "2 rows"})));
}

// Every loss trains through compile and fit: the loss falls well below where it started, and the metrics
// say the model learned (the gradients themselves are checked in test_ops_loss).
BOOST_AUTO_TEST_CASE(compile_with_each_loss_trains) {
    const auto linear = examples(256, 1, 1, [](const float* x, float* y) { y[0] = 2 * x[0] - x[1] + 0.5f * x[2]; });
    for (const char* name : {"mse", "mae", "huber"}) {
        const Trained r = train(models::Dense(1), name, {"mae", "mse"}, linear);
        BOOST_TEST(r.after < 0.2 * r.before, name << ": " << r.before << " -> " << r.after);
        BOOST_TEST(*models::find_metric(r.evaluation.metrics, "mae") < 0.3, name);
        BOOST_TEST(std::isnan(r.evaluation.accuracy));
    }
    // Binary and multi-label: each output says whether one feature (or two) is positive.
    const auto labels =
        examples(256, 3, 2, [](const float* x, float* y) { y[0] = x[0] > 0, y[1] = x[1] + x[2] > 0, y[2] = x[3] < 0; });
    const Trained logits = train(models::Dense(3), "binary_crossentropy", {"accuracy"}, labels);
    BOOST_TEST(logits.after < 0.5 * logits.before);
    BOOST_TEST(logits.evaluation.accuracy > 0.9);
    const Trained probabilities =
        train(models::Dense(3, "sigmoid"), models::Loss::binary_crossentropy(false), {"binary_accuracy"}, labels);
    BOOST_TEST(probabilities.after < 0.5 * probabilities.before);
    BOOST_TEST(probabilities.evaluation.accuracy > 0.9);
    // Three classes by the largest of three features, one-hot and as indices.
    const auto largest = [](const float* x) { return x[0] > x[1] ? (x[0] > x[2] ? 0 : 2) : (x[1] > x[2] ? 1 : 2); };
    const auto one_hot = examples(256, 3, 3, [&](const float* x, float* y) { y[largest(x)] = 1; });
    const auto indices = examples(256, 0, 3, [&](const float* x, float* y) { y[0] = float(largest(x)); });
    for (bool scaled : {false, true}) {
        amp::set_global_policy(scaled ? "mixed_float16" : "float32");
        const Trained cce = train(models::Dense(3), "categorical_crossentropy", {"accuracy"}, one_hot, scaled);
        const Trained softmax = train(models::Dense(3, "softmax"), models::Loss::categorical_crossentropy(false),
                                      {"categorical_accuracy"}, one_hot, scaled);
        const Trained scce = train(models::Dense(3), "sparse_categorical_crossentropy",
                                   {"accuracy", models::Metric::top_k(2)}, indices, scaled);
        amp::set_global_policy("float32");
        for (const Trained* r : {&cce, &softmax, &scce}) {
            BOOST_TEST(r->after < 0.5 * r->before, "scaled " << scaled << ": " << r->before << " -> " << r->after);
            BOOST_TEST(r->evaluation.accuracy > 0.85, "scaled " << scaled);
        }
        BOOST_TEST(*models::find_metric(scce.evaluation.metrics, "sparse_top_2_categorical_accuracy") >=
                   scce.evaluation.accuracy);
    }
}

// A loss by name reads logits; compile refuses it for a model that ends in softmax or sigmoid.
BOOST_AUTO_TEST_CASE(compile_refuses_logits_losses_on_probabilities) {
    for (const char* activation : {"softmax", "sigmoid"}) {
        models::Sequential model{models::Dense(3, activation)};
        model.build(Shape{4});
        auto opt = std::make_shared<optim::Adam>(optim::Adam::Options{});
        BOOST_TEST((throws_with<std::invalid_argument>(
            [&] { model.compile(opt, "categorical_crossentropy"); },
            {"'categorical_crossentropy' reads logits", "probabilities", "from_logits=*/false"})));
        model.compile(opt, models::Loss::categorical_crossentropy(false));
        BOOST_TEST(model.compiled());
    }
}
