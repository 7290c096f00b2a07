#define BOOST_TEST_MODULE fp8_scaling
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace mixprec;
using amp::Fp8Recipe;
using amp::Fp8Scaling;
using autodiff::Dtype;

namespace {

constexpr float infinity = std::numeric_limits<float>::infinity();

/// The scales a delayed recipe uses in each step for one tensor whose amax is amaxes[step].
std::vector<float> delayed_scales(amp::Fp8ScalingOptions options, const std::vector<float>& amaxes) {
    Fp8Scaling scaling(options);
    std::vector<float> used;
    for (float a : amaxes) {
        used.push_back(scaling.scale_for("dense/input", Dtype::float8_e4m3, a));
        scaling.end_step();
    }
    return used;
}

} // namespace

BOOST_AUTO_TEST_CASE(current_scaling_follows_the_tensor) {
    Fp8Scaling s({.recipe = Fp8Recipe::current});
    BOOST_TEST(s.scale_for("a", Dtype::float8_e4m3, 2.0f) == 224.0f);
    BOOST_TEST(s.scale_for("a", Dtype::float8_e5m2, 2.0f) == 28672.0f);
    BOOST_TEST(s.scale_for("a", Dtype::float8_e4m3, 3.0f) == 448.0f / 3.0f);
    for (float a : {0.0f, infinity, std::numeric_limits<float>::quiet_NaN()})
        BOOST_TEST(s.scale_for("a", Dtype::float8_e4m3, a) == 1.0f);
    // A scale beyond float32 becomes its largest finite.
    BOOST_TEST(s.scale_for("a", Dtype::float8_e5m2, 1e-40f) == std::numeric_limits<float>::max());
    BOOST_TEST(s.tensors().empty()); // current scaling keeps no state

    Fp8Scaling floored({.recipe = Fp8Recipe::current, .epsilon = 0.5f});
    BOOST_TEST(floored.scale_for("a", Dtype::float8_e4m3, 0.001f) == 896.0f);
    Fp8Scaling powers({.recipe = Fp8Recipe::current, .power_of_two = true});
    BOOST_TEST(powers.scale_for("a", Dtype::float8_e4m3, 3.0f) == 128.0f); // 149.3 rounded down
    BOOST_TEST(powers.scale_for("a", Dtype::float8_e4m3, 0.875f) == 512.0f);
}

BOOST_AUTO_TEST_CASE(delayed_scaling_uses_the_history_of_earlier_steps) {
    const std::vector<float> amaxes{4.0f, 2.0f, 1.0f, 0.5f, 0.25f, 8.0f};
    // The first step uses 1; each later one the largest amax of the last 3 steps.
    const std::vector<float> window = delayed_scales({.history_length = 3}, amaxes);
    BOOST_TEST(window == (std::vector<float>{1.0f, 112.0f, 112.0f, 112.0f, 224.0f, 448.0f}),
               boost::test_tools::per_element());
    const std::vector<float> recent = delayed_scales({.amax_compute = amp::AmaxCompute::most_recent}, amaxes);
    BOOST_TEST(recent == (std::vector<float>{1.0f, 112.0f, 224.0f, 448.0f, 896.0f, 1792.0f}),
               boost::test_tools::per_element());
    // A margin of 2 keeps 4× headroom.
    const std::vector<float> margin = delayed_scales({.history_length = 1, .margin = 2}, {4.0f, 1.0f});
    BOOST_TEST(margin == (std::vector<float>{1.0f, 28.0f}), boost::test_tools::per_element());
    // An all-zero step leaves the scale where it was (history of one step).
    const std::vector<float> zero = delayed_scales({.history_length = 1}, {2.0f, 0.0f, 0.0f, 4.0f});
    BOOST_TEST(zero == (std::vector<float>{1.0f, 224.0f, 224.0f, 224.0f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(delayed_scaling_keeps_the_largest_cast_of_a_step) {
    Fp8Scaling s({.history_length = 2});
    BOOST_TEST(s.scale_for("t", Dtype::float8_e4m3, 1.0f) == 1.0f);
    BOOST_TEST(s.scale_for("t", Dtype::float8_e4m3, 7.0f) == 1.0f);
    BOOST_TEST(s.scale_for("t", Dtype::float8_e4m3, 2.0f) == 1.0f);
    s.end_step();
    BOOST_TEST(s.tensors().at("t").history == (std::vector<float>{7.0f}), boost::test_tools::per_element());
    BOOST_TEST(s.tensors().at("t").scale == 64.0f);
    // A step without a cast of "t" neither records nor moves its history.
    s.scale_for("u", Dtype::float8_e5m2, 1.0f);
    s.end_step();
    BOOST_TEST(s.tensors().at("t").history.size() == 1u);
    BOOST_TEST(s.tensors().at("u").scale == 57344.0f);
}

BOOST_AUTO_TEST_CASE(dense_casts_name_their_tensors) {
    Fp8Scaling s;
    const autodiff::Fp8DenseCasts casts = s.dense_casts("dense_1");
    BOOST_TEST((casts.input.format == Dtype::float8_e4m3 && casts.kernel.format == Dtype::float8_e4m3));
    BOOST_TEST((casts.output_grad.format == Dtype::float8_e5m2));
    casts.input.scale(1.0f);
    casts.kernel.scale(2.0f);
    casts.output_grad.scale(4.0f);
    s.end_step();
    BOOST_TEST(s.tensors().size() == 3u);
    BOOST_TEST(s.tensors().at("dense_1/input").scale == 448.0f);
    BOOST_TEST(s.tensors().at("dense_1/kernel").scale == 224.0f);
    BOOST_TEST(s.tensors().at("dense_1/output_grad").scale == 14336.0f);
}

// Steps of a dense product with delayed scaling: the first uses scale 1, the next ones the amax of the
// step before, so the cast of a small input keeps its digits.
BOOST_AUTO_TEST_CASE(delayed_scaling_drives_dense_fp8) {
    Fp8Scaling s;
    const autodiff::Tensor x = autodiff::Tensor::full(autodiff::Shape{2, 3}, 0.01f);
    const autodiff::Tensor w = autodiff::Tensor::full(autodiff::Shape{3, 1}, 1.0f);
    std::vector<float> y;
    for (int step = 0; step < 2; ++step) {
        y.push_back(autodiff::dense_fp8(x, w, std::nullopt, s.dense_casts("dense")).flat(0));
        s.end_step();
    }
    // Unscaled, 0.01 is an e4m3 subnormal and rounds to 5 · 2^-9 = 0.009765625; scaled by 448 / 0.01 it
    // lands on 448, a normal number.
    BOOST_TEST(y[0] == 3 * float(autodiff::float8_e4m3(0.01f)));
    BOOST_TEST(std::fabs(y[1] - 0.03f) < std::fabs(y[0] - 0.03f));
    BOOST_TEST(s.tensors().at("dense/input").scale == 44800.0f);
}

// With scale_gradients off, output gradients are cast with scale 1 and keep no scaling state: the loss
// scale places them. The option travels in the state; a state saved before it existed reads as scaled.
BOOST_AUTO_TEST_CASE(gradients_left_to_the_loss_scale) {
    Fp8Scaling s({.scale_gradients = false});
    const autodiff::Fp8DenseCasts casts = s.dense_casts("dense_1");
    BOOST_TEST((casts.output_grad.format == Dtype::float8_e5m2));
    BOOST_TEST(casts.output_grad.scale(1e-6f) == 1.0f);
    BOOST_TEST((casts.output_grad.overflow == autodiff::Overflow::infinity)); // the loss scale must see it
    BOOST_TEST((casts.input.overflow == autodiff::Overflow::saturate));
    casts.input.scale(1.0f);
    s.end_step();
    BOOST_TEST(s.tensors().count("dense_1/output_grad") == 0u);
    BOOST_TEST(s.tensors().count("dense_1/input") == 1u);
    const Fp8Scaling back = Fp8Scaling::from_values(s.values());
    BOOST_TEST(!back.options().scale_gradients);
    std::vector<optim::StateValue> old = Fp8Scaling().values();
    std::erase_if(old, [](const optim::StateValue& v) { return v.name == "fp8/scale_gradients"; });
    BOOST_TEST(Fp8Scaling::from_values(old).options().scale_gradients);
}

// With stochastic_gradients, each output gradient cast gets its own random stream: keyed by the seed,
// the steps finished, the layer and its call in the step, so that a restored state draws the same.
BOOST_AUTO_TEST_CASE(stochastic_gradient_casts_get_their_own_streams) {
    BOOST_TEST(!Fp8Scaling().dense_casts("d").output_grad.stochastic.has_value());
    Fp8Scaling s({.stochastic_gradients = true, .seed = 5});
    const auto key = [](Fp8Scaling& f, const std::string& layer) {
        return *f.dense_casts(layer).output_grad.stochastic;
    };
    const std::uint64_t first = key(s, "dense_1"), again = key(s, "dense_1"), other = key(s, "dense_2");
    BOOST_TEST(!s.dense_casts("dense_1").input.stochastic.has_value()); // forward casts round to nearest
    BOOST_TEST(first != again);
    BOOST_TEST(first != other);
    s.end_step();
    BOOST_TEST(s.steps() == 1u);
    Fp8Scaling restored = Fp8Scaling::from_values(s.values());
    BOOST_TEST(restored.steps() == 1u);
    BOOST_TEST(restored.options().seed == 5u);
    const std::uint64_t next = key(s, "dense_1");
    BOOST_TEST(next != first); // a new step, a new stream
    BOOST_TEST(key(restored, "dense_1") == next);
    Fp8Scaling other_seed({.stochastic_gradients = true, .seed = 6});
    BOOST_TEST(key(other_seed, "dense_1") != first);
    // The documented derivation.
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (char c : std::string("dense_1/output_grad")) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    using autodiff::counter_bits;
    BOOST_TEST(first == counter_bits(counter_bits(counter_bits(5, 0), h), 0));
    BOOST_TEST(again == counter_bits(counter_bits(counter_bits(5, 0), h), 1));
    // States saved before these values existed: nearest rounding, no steps counted.
    std::vector<optim::StateValue> old = s.values();
    std::erase_if(old, [](const optim::StateValue& v) {
        return v.name == "fp8/stochastic_gradients" || v.name == "fp8/seed" || v.name == "fp8/steps";
    });
    const Fp8Scaling before = Fp8Scaling::from_values(old);
    BOOST_TEST(!before.options().stochastic_gradients);
    BOOST_TEST(before.steps() == 0u);
}

// In a step that records telemetry, each FP8 cast of a layer reports under "<layer>/fp8_<tensor>".
BOOST_AUTO_TEST_CASE(telemetry_reports_each_cast) {
    const auto x = autodiff::Tensor::full(autodiff::Shape{4, 8}, 2.0f);
    const auto w = autodiff::Tensor::full(autodiff::Shape{8, 3}, 0.5f);
    Fp8Scaling s({.recipe = Fp8Recipe::current});
    BOOST_TEST(!s.dense_casts("d").input.observe); // no telemetry, no observing
    amp::StepTelemetry telemetry;
    autodiff::GradientTape tape({.telemetry = true});
    tape.watch(w);
    const autodiff::Tensor y = autodiff::dense_fp8(x, w, std::nullopt, s.dense_casts("d"));
    tape.gradient(autodiff::sum(y), {w});
    telemetry.record(tape, {});
    const amp::Telemetry& t = telemetry.result();
    BOOST_TEST(t["d/fp8_input"].count == 32u);
    BOOST_TEST(t["d/fp8_kernel"].count == 24u);
    BOOST_TEST(t["d/fp8_output_grad"].count == 12u);
    BOOST_TEST(t["d/fp8_input"].amax == 2.0f * 224.0f); // x · s with s = 448 / 2
    BOOST_TEST(t["d/fp8_output_grad"].underflow == 0u);
}

BOOST_AUTO_TEST_CASE(options_out_of_range_are_refused) {
    BOOST_CHECK_THROW(Fp8Scaling({.history_length = 0}), std::invalid_argument);
    BOOST_CHECK_THROW(Fp8Scaling({.history_length = 1025}), std::invalid_argument);
    BOOST_CHECK_THROW(Fp8Scaling({.margin = -1}), std::invalid_argument);
    BOOST_CHECK_THROW(Fp8Scaling({.epsilon = -1.0f}), std::invalid_argument);
    BOOST_CHECK_THROW(Fp8Scaling({.forward = Dtype::bfloat16}), std::invalid_argument);
    BOOST_CHECK_THROW(amp::fp8_max(Dtype::float16), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(state_round_trips_through_values) {
    Fp8Scaling s({.history_length = 3, .margin = 1, .power_of_two = true});
    for (int step = 0; step < 5; ++step) {
        const autodiff::Fp8DenseCasts casts = s.dense_casts("dense_" + std::to_string(step % 2));
        casts.input.scale(float(step + 1));
        casts.kernel.scale(0.5f);
        casts.output_grad.scale(step == 2 ? 0.0f : 1e-6f * float(step + 1));
        s.end_step();
    }
    const Fp8Scaling back = Fp8Scaling::from_values(s.values());
    BOOST_TEST((back.tensors() == s.tensors()));
    BOOST_TEST(back.options().history_length == 3);
    BOOST_TEST(back.options().margin == 1);
    BOOST_TEST(back.options().power_of_two);
    BOOST_TEST((back.values() == s.values()));
}

BOOST_AUTO_TEST_CASE(hostile_values_are_refused) {
    Fp8Scaling s({.history_length = 2});
    s.scale_for("d/input", Dtype::float8_e4m3, 3.0f);
    s.end_step();
    const std::vector<optim::StateValue> good = s.values();
    const auto refused = [&](auto change, const char* words) {
        std::vector<optim::StateValue> v = good;
        change(v);
        try {
            Fp8Scaling::from_values(v);
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
            return;
        }
        BOOST_ERROR("accepted: " << words);
    };
    const auto set = [](const std::string& name, optim::StateValue::Value value) {
        return [=](std::vector<optim::StateValue>& v) {
            for (auto& x : v)
                if (x.name == name) x.value = value;
        };
    };
    const auto add = [](const std::string& name, optim::StateValue::Value value) {
        return [=](std::vector<optim::StateValue>& v) { v.push_back({name, value}); };
    };
    refused(set("fp8/history_length", std::int64_t{1 << 30}), "fp8/history_length");
    refused(set("fp8/tensors", std::int64_t{1'000'000'000}), "fp8/tensors");
    refused(set("fp8/tensors", std::int64_t{2}), "do not match");
    refused(set("fp8/scale/0", 0.0), "fp8/scale/0");
    refused(set("fp8/scale/0", std::int64_t{1}), "real");
    refused(set("fp8/history/0/0", -1.0), "fp8/history/0/0");
    refused(set("fp8/history/0/0", 0.1), "float32"); // not a float32
    refused(set("fp8/tensor/0/d/input", std::int64_t(Dtype::float16)), "FP8");
    refused(
        [](std::vector<optim::StateValue>& v) { // three amaxes for a history of two
            for (const char* j : {"1", "2"}) v.push_back({std::string("fp8/history/0/") + j, 1.0});
        },
        "longer");
    refused(add("fp8/history/0/5", 1.0), "gaps");
    refused(add("fp8/history/0/99999999999999999999", 1.0), "position");
    refused(add("fp8/scale/0", 1.0), "twice");
    refused(add("fp8/whatever", std::int64_t{1}), "fp8/whatever");
    refused([](std::vector<optim::StateValue>& v) { v.erase(v.begin()); }, "fp8/recipe");
    refused(set("fp8/steps", std::int64_t{-1}), "fp8/steps");
    refused(set("fp8/stochastic_gradients", std::int64_t{2}), "fp8/stochastic_gradients");
    refused(set("fp8/seed", 1.5), "fp8/seed");
    refused([](std::vector<optim::StateValue>& v) { std::erase_if(v, [](auto& x) { return x.name == "fp8/seed"; }); },
            "fp8/seed");
}

// A LossScaleOptimizer that keeps FP8 scales saves them with its state, and refuses a state without them.
BOOST_AUTO_TEST_CASE(loss_scale_optimizer_keeps_the_scales) {
    const auto make = [] {
        auto o = std::make_unique<amp::LossScaleOptimizer>(std::make_unique<optim::SGD>(optim::SGD::Options{}),
                                                           amp::LossScaleOptions{.dynamic = false, .initial_scale = 1});
        o->scale_fp8({.history_length = 4});
        return o;
    };
    auto a = make();
    autodiff::Variable v(autodiff::Tensor::full(autodiff::Shape{2}, 1.0f), "v");
    a->fp8_scales()->dense_casts("dense").input.scale(2.0f);
    a->apply({autodiff::Tensor::full(autodiff::Shape{2}, 0.5f)}, {v}); // the step's end moves the scales
    BOOST_TEST(a->fp8_scaling()->tensors().at("dense/input").scale == 224.0f);
    auto b = make();
    b->load_state(a->state({v}), {v});
    BOOST_TEST((b->fp8_scaling()->tensors() == a->fp8_scaling()->tensors()));
    amp::LossScaleOptimizer plain(std::make_unique<optim::SGD>(optim::SGD::Options{}));
    BOOST_CHECK_THROW(plain.load_state(a->state({v}), {v}), std::invalid_argument);
    BOOST_CHECK_THROW(b->load_state(plain.state({v}), {v}), std::invalid_argument);
}
