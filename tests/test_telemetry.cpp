// Rounding telemetry through the tape, the layers and fit: exact counts where the arithmetic is exact,
// names for every variable and layer, and no bit of training changed by counting.
#define BOOST_TEST_MODULE telemetry
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "blobs.hpp"
#include "policy_guard.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::RoundingStats;
using autodiff::Shape;
using autodiff::Tensor;

namespace {

using test_data::PolicyGuard;

/// x (4, 8) in float16 with x[b][i] = 2^-6 where b < i mod 4, else 0 (exact), so that the gradient of
/// sum(x @ w) · 2^-20 with respect to w (8, 3) is, exactly, K · 2^-26 with K = i mod 4 ∈ {0, 1, 2, 3}: zero,
/// below half of float16's smallest subnormal 2^-24 or at it (both round to zero), or a subnormal.
Tensor exact_inputs() {
    std::vector<float> x(32);
    for (std::size_t b = 0; b < 4; ++b)
        for (std::size_t i = 0; i < 8; ++i) x[b * 8 + i] = b < i % 4 ? std::ldexp(1.0f, -6) : 0.0f;
    return Tensor::from_floats(Shape{4, 8}, x, Dtype::float16);
}

} // namespace

BOOST_AUTO_TEST_CASE(tape_counts_what_rounding_a_weight_gradient_loses) {
    const Tensor x = exact_inputs();
    autodiff::Variable w(Tensor::full(Shape{8, 3}, 1.0f), "w");
    w.set_working_dtype(Dtype::float16);
    autodiff::GradientTape tape({.telemetry = true});
    Tensor target;
    {
        const autodiff::OpScope scope("layer");
        target = autodiff::scale(autodiff::sum(autodiff::matmul(x, w.read())), std::ldexp(1.0f, -20));
    }
    const auto grads = tape.gradient(target, std::vector<autodiff::Variable>{w});

    std::vector<float> exact(24); // d target / d w[i][j] = Σ_b x[b][i] · 2^-20, exactly
    const std::vector<float> xs = x.to_floats();
    for (std::size_t i = 0; i < 8; ++i)
        for (std::size_t j = 0; j < 3; ++j) {
            double s = 0;
            for (std::size_t b = 0; b < 4; ++b) s += double(xs[b * 8 + i]);
            exact[i * 3 + j] = float(s * std::ldexp(1.0, -20));
        }
    const RoundingStats want = autodiff::classify(exact, Dtype::float16);
    const auto got = tape.gradient_stats(w);
    BOOST_TEST_REQUIRE(got.has_value());
    BOOST_TEST((*got == want));
    BOOST_TEST(got->count == 24u);
    BOOST_TEST(got->underflow == 12u); // K = 1, 2: 2^-26 and the tie 2^-25 round to zero
    BOOST_TEST(got->zeros == 6u);
    BOOST_TEST(got->subnormal == 6u); // K = 3
    // the stored gradient agrees: as many zeros as were zero or underflowed
    const std::vector<float> stored = grads[0].to_floats();
    BOOST_TEST(std::size_t(std::count(stored.begin(), stored.end(), 0.0f)) == got->zeros + got->underflow);

    // The scope holds everything the three ops' backward passes rounded, the weight gradient among it.
    const RoundingStats scope = tape.scope_stats("layer");
    BOOST_TEST(scope.count >= got->count);
    BOOST_TEST(scope.underflow >= got->underflow);
    BOOST_TEST(tape.scope_stats("elsewhere").count == 0u);
}

BOOST_AUTO_TEST_CASE(a_tape_without_telemetry_counts_nothing) {
    autodiff::Variable w(Tensor::full(Shape{2}, 1.0f), "w");
    w.set_working_dtype(Dtype::float16);
    autodiff::GradientTape tape;
    const Tensor y = autodiff::sum(autodiff::mul(w.read(), w.read()));
    tape.gradient(y, std::vector<autodiff::Variable>{w});
    BOOST_TEST(!tape.gradient_stats(w).has_value());
    BOOST_TEST(autodiff::active_rounding_recorder() == nullptr);
}

BOOST_AUTO_TEST_CASE(step_telemetry_names_every_variable_and_layer) {
    const PolicyGuard policy("mixed_float16");
    models::Sequential model;
    model.add(models::Dense(16, "relu"));
    model.add(models::Dense(3));
    model.build(Shape{8}, 1);
    const auto data = test_data::blobs(32, 2);
    Tensor x, y;
    std::vector<std::size_t> all(32);
    std::iota(all.begin(), all.end(), std::size_t{0});
    data.batch(all, x, y);
    const auto variables = model.trainable_variables();

    amp::StepTelemetry telemetry;
    autodiff::GradientTape tape({.telemetry = true});
    const auto loss = models::Loss::sparse_categorical_crossentropy(true)(y, model(x, {.training = true}));
    tape.gradient(autodiff::scale(loss, 1024.0f), variables);
    const amp::Telemetry t = telemetry.collect(tape, variables);

    for (const auto& v : variables) {
        BOOST_TEST_REQUIRE(t.find(v.name()) != nullptr, v.name());
        BOOST_TEST(t[v.name()].count == v.shape().elements(), v.name());
    }
    BOOST_TEST(t["dense/output_grad"].count == 32u * 16u);
    BOOST_TEST(t["dense_1/output_grad"].count == 32u * 3u);
    BOOST_TEST(t["dense/forward"].count > 0u);
    BOOST_TEST(t["dense/backward"].count > 0u);
    BOOST_TEST(t.find("loss/backward") != nullptr);
    BOOST_CHECK_THROW(t["nothing"], std::out_of_range);

    autodiff::GradientTape plain;
    BOOST_CHECK_THROW(telemetry.collect(plain, variables), std::logic_error);
}

BOOST_AUTO_TEST_CASE(fit_records_on_the_steps_asked_and_changes_no_bit) {
    const PolicyGuard policy("mixed_float16");
    const auto data = test_data::blobs(256, 3);
    struct Seen : models::Callback {
        std::vector<std::int64_t> steps;
        std::shared_ptr<const amp::Telemetry> last;
        void on_step_end(models::FitContext&, const models::StepLogs& logs) override {
            if (!logs.telemetry) return;
            steps.push_back(logs.step);
            last = logs.telemetry;
        }
    };
    const auto run = [&](std::int64_t every, Seen* seen, const std::filesystem::path& log) {
        models::Sequential model;
        model.add(models::Dense(16, "relu"));
        model.add(models::Dense(3));
        model.build(Shape{8}, 5);
        amp::LossScaleOptimizer opt(std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}));
        models::TrainingState state;
        models::JsonLinesLogger logger(log);
        models::FitOptions options{.epochs = 1, .batch_size = 32, .seed = 1, .telemetry_every = every};
        options.callbacks.push_back(&logger);
        if (seen) options.callbacks.push_back(seen);
        models::fit(model, opt, data, state, options);
        return models::weights_digest(model.variables());
    };
    const auto dir = std::filesystem::temp_directory_path() / "mixprec_test_telemetry";
    std::filesystem::create_directories(dir);
    Seen seen;
    const std::string counted = run(3, &seen, dir / "t.jsonl");
    BOOST_TEST(counted == run(0, nullptr, dir / "plain.jsonl"));
    BOOST_TEST(seen.steps == (std::vector<std::int64_t>{3, 6}), "8 steps, every 3rd");
    BOOST_TEST_REQUIRE(seen.last != nullptr);
    BOOST_TEST((*seen.last)["dense/kernel"].count == 8u * 16u);

    std::ifstream in(dir / "t.jsonl");
    int with = 0, lines = 0;
    for (std::string line; std::getline(in, line); ++lines)
        if (line.find("\"telemetry\":{\"dense/kernel\":{\"count\":128,") != std::string::npos) ++with;
    BOOST_TEST(with == 2);
    BOOST_TEST(lines >= 8);
    std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(telemetry_json_writes_every_field_and_the_histogram) {
    amp::Telemetry t;
    std::vector<float> v{0.0f, 1e-9f, 3.0f, 5.0f};
    t.add("a/kernel", autodiff::classify(v, Dtype::float16, true));
    const std::string json = models::telemetry_json(t);
    BOOST_TEST(json ==
               "{\"a/kernel\":{\"count\":4,\"zeros\":1,\"underflow\":1,\"subnormal\":0,\"overflow\":0,\"nonfinite\":0,"
               "\"amax\":5.0,\"log2\":{\"min\":-30,\"counts\":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
               "0,0,0,0,1,1]}}}");
}
