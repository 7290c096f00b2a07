// Per-layer loss scaling: the rule's exact steps, its state, and training through fit with it.
#define BOOST_TEST_MODULE layer_scales
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "blobs.hpp"
#include "policy_guard.hpp"

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Shape;
using autodiff::Tensor;

namespace {

using test_data::PolicyGuard;

/// A step whose only op inside scope "a" rounds d/dw of k · Σ w·c, that is k·c, into float16 (and d/dc =
/// k·w = 0): the largest magnitude layer "a"'s backward rounds is exactly k·c (k and c exact in float16).
std::unique_ptr<autodiff::GradientTape> step_with_amax(float k, float c) {
    auto tape = std::make_unique<autodiff::GradientTape>(autodiff::GradientTapeOptions{.telemetry = true});
    autodiff::Variable w(Tensor(Shape{4}), "a/w");
    w.set_working_dtype(Dtype::float16);
    Tensor inner;
    {
        const autodiff::OpScope scope("a");
        inner = autodiff::mul(w.read(), Tensor::full(Shape{4}, c, Dtype::float16));
    }
    const Tensor target = autodiff::scale(autodiff::sum(inner), k);
    tape->gradient(target, std::vector<autodiff::Variable>{w});
    return tape;
}

int exponent_after_step(float k, float c, bool applied = true) {
    amp::LayerScales scales({.margin = 2, .window = 2}, 10);
    const auto tape = step_with_amax(k, c);
    scales.observe(*tape);
    BOOST_TEST_REQUIRE(scales.layers().size() == 1u);
    BOOST_TEST(scales.layers()[0].name == "a");
    BOOST_TEST(scales.factor("a") == 1.0f); // a layer seen first takes the exponent after it
    scales.update(applied, Dtype::float16);
    return scales.layers()[0].exponent;
}

models::Sequential mlp(std::uint64_t seed) {
    models::Sequential model;
    model.add(models::Dense(32, "relu"));
    model.add(models::Dense(32, "relu"));
    model.add(models::Dense(3));
    model.build(Shape{8}, seed);
    return model;
}

} // namespace

// safe = 65520 / 2^margin = 16380; the band without change is [16380 / 4, 16380).
BOOST_AUTO_TEST_CASE(the_rule_moves_each_exponent_as_its_table_says) {
    BOOST_TEST(exponent_after_step(1.0f, 3.0f) == 10 + 12);    // 3 · 2^12 = 12288 < 16380 ≤ 3 · 2^13
    BOOST_TEST(exponent_after_step(1.0f, 5000.0f) == 10);      // 5000 is inside the band
    BOOST_TEST(exponent_after_step(2.0f, 10000.0f) == 10 - 1); // 20000 ≥ safe, no overflow: back off once
    BOOST_TEST(exponent_after_step(7.0f, 10000.0f) == 10 - 3); // 70000 overflows; 70000 / 8 < safe
    BOOST_TEST(exponent_after_step(1.0f, 0.0f) == 10);         // all zeros: nothing to go by
    // A skipped step where this layer did not overflow: every exponent backs off once.
    BOOST_TEST(exponent_after_step(1.0f, 3.0f, /*applied=*/false) == 10 - 1);
}

BOOST_AUTO_TEST_CASE(after_backing_off_a_layer_waits_before_it_grows) {
    amp::LayerScales scales({.margin = 2, .window = 2, .growth_interval = 3}, 10);
    const auto step = [&](float k, float c) {
        scales.observe(*step_with_amax(k, c));
        scales.update(true, Dtype::float16);
        return scales.layers()[0].exponent;
    };
    BOOST_TEST(step(7.0f, 10000.0f) == 10 - 3); // overflow: back off, and wait
    BOOST_TEST(step(1.0f, 3.0f) == 7);          // room to grow, but 1 step since moving
    BOOST_TEST(step(1.0f, 3.0f) == 7);          // 2
    BOOST_TEST(step(1.0f, 3.0f) == 7 + 12);     // the third: grows to the band at once
    BOOST_TEST(scales.layers()[0].unmoved == 0);
}

BOOST_AUTO_TEST_CASE(state_round_trips_and_hostile_values_are_refused) {
    amp::LayerScales scales({}, 12);
    scales.observe(*step_with_amax(1.0f, 3.0f));
    scales.update(true, Dtype::float16);
    const auto values = scales.values();
    const amp::LayerScales back = amp::LayerScales::from_values(values);
    BOOST_TEST((back.layers() == scales.layers()));
    BOOST_TEST(back.loss_exponent() == scales.loss_exponent());

    auto missing = values;
    missing.erase(missing.begin());
    BOOST_CHECK_THROW(amp::LayerScales::from_values(missing), std::invalid_argument);
    auto absurd = values;
    for (auto& v : absurd)
        if (v.name == "layer_scale/layers") v.value = std::int64_t{1} << 40;
    BOOST_CHECK_THROW(amp::LayerScales::from_values(absurd), std::invalid_argument);
    auto out_of_range = values;
    out_of_range.back().value = std::int64_t{999};
    BOOST_CHECK_THROW(amp::LayerScales::from_values(out_of_range), std::invalid_argument);
    auto unknown = values;
    unknown.push_back({"layer_scale/surprise", std::int64_t{1}});
    BOOST_CHECK_THROW(amp::LayerScales::from_values(unknown), std::invalid_argument);
    // Value names with a position out of form: "layer/<digits>/<name>", "unmoved/<digits>".
    for (const auto& [from, to] :
         std::vector<std::pair<std::string, std::string>>{{"layer_scale/layer/0/", "layer_scale/layer/0/"},
                                                          {"layer_scale/layer/0/", "layer_scale/layer/x/dense"},
                                                          {"layer_scale/layer/0/", "layer_scale/layer//dense"},
                                                          {"layer_scale/unmoved/0", "layer_scale/unmoved/0/extra"},
                                                          {"layer_scale/unmoved/0", "layer_scale/unmoved/"}}) {
        auto renamed = values;
        std::size_t found = 0;
        for (auto& v : renamed)
            if (v.name.starts_with(from)) {
                v.name = to;
                ++found;
            }
        BOOST_TEST_REQUIRE(found == 1u, from);
        BOOST_CHECK_THROW(amp::LayerScales::from_values(renamed), std::invalid_argument);
    }
    BOOST_CHECK_THROW(amp::LayerScales({.margin = -1}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(fit_trains_with_a_scale_per_layer) {
    const PolicyGuard policy("mixed_float16");
    const auto train = test_data::blobs(512, 1), test = test_data::blobs(256, 2);
    models::Sequential model = mlp(3);
    amp::LossScaleOptimizer opt(std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}),
                                amp::LossScaleOptions{}, amp::LayerScaleOptions{});
    models::TrainingState state;
    models::fit(model, opt, train, state, {.epochs = 3, .batch_size = 32, .seed = 1});
    BOOST_TEST(models::evaluate(model, test).accuracy > 0.9);
    const amp::LayerScales* scales = opt.layer_scales();
    BOOST_TEST_REQUIRE(scales != nullptr);
    BOOST_TEST(scales->layers().size() == 3u);
    for (const auto& l : scales->layers()) BOOST_TEST(l.exponent != 15, l.name << " kept the initial exponent");
    BOOST_TEST(opt.current_loss_scale() == scales->loss_scale());
    // Each weight gradient is unscaled by its own layer's scale.
    BOOST_TEST(scales->gradient_scale("dense_1/kernel") == std::ldexp(1.0f, scales->layers()[1].exponent));
}

BOOST_AUTO_TEST_CASE(checkpoints_keep_the_scales_and_resume_exactly) {
    const PolicyGuard policy("mixed_float16");
    const auto train = test_data::blobs(256, 4);
    const auto optimizer = [] {
        return amp::LossScaleOptimizer(std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}),
                                       amp::LossScaleOptions{}, amp::LayerScaleOptions{});
    };
    models::Sequential straight = mlp(5);
    auto opt = optimizer();
    models::TrainingState state;
    models::fit(straight, opt, train, state, {.epochs = 2, .batch_size = 32, .seed = 1});

    const auto path = std::filesystem::temp_directory_path() / "mixprec_test_layer_scales.ckpt";
    models::Sequential first = mlp(5);
    auto opt1 = optimizer();
    models::TrainingState s1;
    models::fit(first, opt1, train, s1, {.epochs = 1, .batch_size = 32, .seed = 1});
    models::save_checkpoint(path, first, opt1, &s1);
    models::Sequential second = mlp(99);
    auto opt2 = optimizer();
    models::TrainingState s2;
    models::load_checkpoint(path, second, opt2, &s2);
    BOOST_TEST((opt2.layer_scales()->layers() == opt1.layer_scales()->layers()));
    models::fit(second, opt2, train, s2, {.epochs = 1, .batch_size = 32, .seed = 1}); // the second epoch
    BOOST_TEST(models::weights_digest(second.variables()) == models::weights_digest(straight.variables()));
    BOOST_TEST((opt2.layer_scales()->layers() == opt.layer_scales()->layers()));

    // A global-scale optimizer refuses per-layer state, by name.
    models::Sequential third = mlp(5);
    amp::LossScaleOptimizer global(std::make_unique<optim::Adam>());
    models::TrainingState s3;
    BOOST_CHECK_THROW(models::load_checkpoint(path, third, global, &s3), std::exception);
    std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(an_inf_from_outside_skips_and_backs_every_scale_off) {
    const PolicyGuard policy("mixed_float16");
    const auto train = test_data::blobs(64, 6);
    models::Sequential model = mlp(7);
    amp::LossScaleOptimizer opt(std::make_unique<optim::Adam>(), amp::LossScaleOptions{}, amp::LayerScaleOptions{});
    models::TrainingState state;
    models::fit(model, opt, train, state, {.batch_size = 32, .seed = 1, .max_steps = 1});
    const auto before = opt.layer_scales()->layers();
    const int loss_before = opt.layer_scales()->loss_exponent();
    const std::string digest = models::weights_digest(model.variables());
    models::FitOptions options{.batch_size = 32, .seed = 1, .max_steps = 2};
    options.gradient_hook = [](std::int64_t, std::vector<Tensor>& grads) {
        grads[0] = Tensor::full(grads[0].shape(), INFINITY, grads[0].dtype());
    };
    models::fit(model, opt, train, state, options);
    BOOST_TEST(opt.last_step_skipped());
    BOOST_TEST(models::weights_digest(model.variables()) == digest);
    BOOST_TEST(opt.layer_scales()->loss_exponent() == loss_before - 1);
    for (std::size_t i = 0; i < before.size(); ++i)
        BOOST_TEST(opt.layer_scales()->layers()[i].exponent == before[i].exponent - 1);
}

BOOST_AUTO_TEST_CASE(models_that_are_not_chains_are_refused) {
    struct Branches : models::Model {
        models::Layer* a;
        Branches() { a = &track(models::Dense(3)); }
        Tensor call(const Tensor& x, const models::CallContext& c) override {
            return autodiff::add((*a)(x, c), (*a)(x, c));
        }
    };
    Branches model;
    model.build(Shape{8}, 1);
    amp::LossScaleOptimizer opt(std::make_unique<optim::Adam>(), amp::LossScaleOptions{}, amp::LayerScaleOptions{});
    models::TrainingState state;
    BOOST_CHECK_THROW(models::fit(model, opt, test_data::blobs(32, 1), state, {.batch_size = 32}),
                      std::invalid_argument);
    BOOST_CHECK_THROW(amp::LossScaleOptimizer(std::make_unique<optim::Adam>(),
                                              amp::LossScaleOptions{.initial_scale = 1000.0f},
                                              amp::LayerScaleOptions{}),
                      std::invalid_argument);
}
