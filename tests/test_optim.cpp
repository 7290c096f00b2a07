#define BOOST_TEST_MODULE optim
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

using namespace mixprec::autodiff;
using namespace mixprec::optim;
namespace tt = boost::test_tools;

namespace {

Tensor vec(std::vector<float> v, Dtype dtype = Dtype::float32) {
    return Tensor::from_floats(Shape{v.size()}, v, dtype);
}

std::vector<Variable> make_variables() {
    return {Variable(vec({0.5f, -1.25f, 2.0f}), "a"), Variable(vec({0.75f, -0.3f}), "b")};
}

// Gradients of (a, b) for steps 1..5.
const std::array<std::array<std::vector<float>, 2>, 5> gradients = {{
    {{{0.3f, -0.6f, 1.2f}, {0.9f, 0.05f}}},
    {{{-0.2f, 0.4f, 0.8f}, {-1.5f, 0.25f}}},
    {{{0.05f, -0.1f, 0.6f}, {0.7f, -0.45f}}},
    {{{0.6f, 0.3f, -0.2f}, {0.02f, 0.35f}}},
    {{{0.01f, -0.02f, 0.05f}, {-0.4f, 0.1f}}},
}};

std::vector<Tensor> step_gradients(std::size_t step, Dtype dtype = Dtype::float32) {
    return {vec(gradients[step][0], dtype), vec(gradients[step][1], dtype)};
}

std::vector<float> weights(const std::vector<Variable>& vars) {
    std::vector<float> out;
    for (const auto& v : vars)
        for (float x : v.value().to_floats()) out.push_back(x);
    return out;
}

// Golden weights (a0, a1, a2, b0, b1) after each of 5 steps, from torch.optim (float32 tensors), with lr schedules
// (in double) and clipping (float32 torch ops) computed explicitly as Keras 3 defines them, by
// tests/golden/optimizers.py (see tests/golden/README.md; `--check tests/test_optim.cpp` compares these tables).
// Made with Debian python3-torch 1.13.1; torch 2.15.0 (PyPI) gives the same bits but for two sgd_nesterov values,
// 1 ulp apart.
// Tolerance: 1e-6 relative (~8 float32 ulps: torch and we round differently, e.g. torch's lerp for m
// and its float32 norms versus our double norm sums).
using Expected = std::array<std::array<float, 5>, 5>;

void check_golden(Optimizer& opt, const Expected& expected) {
    auto vars = make_variables();
    for (std::size_t step = 0; step < 5; ++step) {
        BOOST_TEST_CONTEXT("step " << step + 1) {
            BOOST_TEST(opt.apply(step_gradients(step), vars));
            const std::vector<float> want(expected[step].begin(), expected[step].end());
            BOOST_TEST(weights(vars) == want, tt::tolerance(1e-6f) << tt::per_element());
        }
    }
    BOOST_TEST(opt.iterations() == 5);
}

std::string message_of(auto&& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(no std::invalid_argument thrown)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const Expected sgd_plain = {{
    {0.469999999f, -1.20000005f, 1.95000005f, 0.699999988f, -0.305000007f},
    {0.49000001f, -1.24000001f, 1.9000001f, 0.75f, -0.330000013f},
    {0.485000014f, -1.23000002f, 1.85000014f, 0.699999988f, -0.285000026f},
    {0.435000002f, -1.25999999f, 1.87000012f, 0.698000014f, -0.320000023f},
    {0.434000015f, -1.25800002f, 1.86500013f, 0.738000035f, -0.330000013f},
}};
const Expected sgd_momentum = {{
    {0.489089102f, -1.22817826f, 1.95635641f, 0.704999983f, -0.30250001f},
    {0.489269286f, -1.22853863f, 1.87707722f, 0.713819683f, -0.312969953f},
    {0.486931473f, -1.22386301f, 1.77572596f, 0.686757386f, -0.299892902f},
    {0.454827428f, -1.2346549f, 1.69450974f, 0.661401331f, -0.305623561f},
    {0.425433785f, -1.24336767f, 1.6189152f, 0.658580899f, -0.315781146f},
}};
const Expected sgd_nesterov = {{
    {0.47536388f, -1.20072782f, 1.90145552f, 0.676091671f, -0.304106027f},
    {0.481811106f, -1.21362233f, 1.80559051f, 0.763863742f, -0.324574381f},
    {0.475710332f, -1.20142078f, 1.70193267f, 0.720392227f, -0.29200086f},
    {0.418829709f, -1.22265959f, 1.66100645f, 0.711815059f, -0.315442055f},
    {0.396425217f, -1.22585058f, 1.61576545f, 0.74175328f, -0.329195023f},
}};
const Expected sgd_weight_decay_exponential = {{
    {0.465000004f, -1.17750001f, 1.86000001f, 0.652499974f, -0.302000016f},
    {0.463479728f, -1.17182553f, 1.74078178f, 0.719480693f, -0.318249345f},
    {0.458124816f, -1.1589601f, 1.65992785f, 0.704564512f, -0.299903095f},
    {0.433398664f, -1.16092062f, 1.63254404f, 0.696092725f, -0.304730773f},
    {0.423323154f, -1.15821147f, 1.61753106f, 0.701357245f, -0.308175772f},
}};
const Expected adam_plain = {{
    {0.49000001f, -1.24000001f, 1.99000001f, 0.74000001f, -0.309999973f},
    {0.48820895f, -1.23820901f, 1.980389f, 0.742603064f, -0.318687826f},
    {0.485449642f, -1.23544967f, 1.97065461f, 0.740700245f, -0.314727396f},
    {0.479215533f, -1.23686147f, 1.96392798f, 0.739045978f, -0.315671533f},
    {0.473861545f, -1.23784876f, 1.95799029f, 0.739427388f, -0.317389488f},
}};
const Expected adam_amsgrad_cosine_warmup = {{
    {0.5f, -1.25f, 2.0f, 0.75f, -0.300000012f},
    {0.498554796f, -1.24855483f, 1.99000001f, 0.750526309f, -0.308610469f},
    {0.494585305f, -1.24458528f, 1.97035456f, 0.744492233f, -0.304052263f},
    {0.485575676f, -1.24569154f, 1.95942402f, 0.740528047f, -0.306706607f},
    {0.482333273f, -1.24599326f, 1.95541573f, 0.740204334f, -0.308196723f},
}};
const Expected adamw_clipnorm = {{
    {0.489500016f, -1.23874998f, 1.98800004f, 0.739250004f, -0.309700012f},
    {0.489101142f, -1.23760188f, 1.9760443f, 0.739494026f, -0.318458796f},
    {0.48761633f, -1.23536849f, 1.96430695f, 0.736459911f, -0.314671576f},
    {0.481565773f, -1.23600376f, 1.95530295f, 0.733766794f, -0.315475971f},
    {0.476301402f, -1.23618555f, 1.94719839f, 0.732835531f, -0.316997528f},
}};
const Expected adamw_defaults_exponential_staircase = {{
    {0.489980012f, -1.23995006f, 1.98992002f, 0.739970028f, -0.309987992f},
    {0.488515198f, -1.2384553f, 1.98013687f, 0.742875993f, -0.318586051f},
    {0.487513036f, -1.23743808f, 1.97540712f, 0.742727101f, -0.317440122f},
    {0.484596938f, -1.2377702f, 1.97192633f, 0.742571592f, -0.318290025f},
    {0.483344495f, -1.23787391f, 1.97040963f, 0.742789626f, -0.318859965f},
}};

} // namespace

BOOST_AUTO_TEST_SUITE(golden)

BOOST_AUTO_TEST_CASE(sgd_plain_clipvalue) {
    SGD opt({.learning_rate = 0.1f, .clip = {.clipvalue = 0.5f}});
    check_golden(opt, ::sgd_plain);
}

BOOST_AUTO_TEST_CASE(sgd_momentum_clipnorm) {
    SGD opt({.learning_rate = 0.05f, .momentum = 0.9f, .clip = {.clipnorm = 1.0f}});
    check_golden(opt, ::sgd_momentum);
}

BOOST_AUTO_TEST_CASE(sgd_nesterov_global_clipnorm) {
    SGD opt({.learning_rate = 0.05f, .momentum = 0.8f, .nesterov = true, .clip = {.global_clipnorm = 1.5f}});
    check_golden(opt, ::sgd_nesterov);
}

BOOST_AUTO_TEST_CASE(sgd_weight_decay_exponential_decay) {
    auto lr = std::make_shared<ExponentialDecay>(
        ExponentialDecay::Options{.initial = 0.1f, .decay_steps = 2, .decay_rate = 0.5f});
    SGD opt({.learning_rate = lr, .momentum = 0.5f, .weight_decay = 0.1f});
    check_golden(opt, ::sgd_weight_decay_exponential);
}

BOOST_AUTO_TEST_CASE(adam_global_clipnorm) {
    Adam opt({.learning_rate = 0.01f, .clip = {.global_clipnorm = 1.0f}});
    check_golden(opt, ::adam_plain);
}

BOOST_AUTO_TEST_CASE(adam_amsgrad_cosine_warmup_clipvalue) {
    auto lr = std::make_shared<CosineDecay>(CosineDecay::Options{
        .initial = 0.0f, .decay_steps = 3, .alpha = 0.1f, .warmup_steps = 2, .warmup_target = 0.02f});
    Adam opt({.learning_rate = lr, .amsgrad = true, .clip = {.clipvalue = 0.8f}});
    check_golden(opt, ::adam_amsgrad_cosine_warmup);
}

BOOST_AUTO_TEST_CASE(adamw_clipnorm) {
    AdamW opt({.learning_rate = 0.01f, .clip = {.clipnorm = 1.0f}, .weight_decay = 0.1f});
    check_golden(opt, ::adamw_clipnorm);
}

BOOST_AUTO_TEST_CASE(adamw_defaults_exponential_staircase) {
    auto lr = std::make_shared<ExponentialDecay>(
        ExponentialDecay::Options{.initial = 0.01f, .decay_steps = 2, .decay_rate = 0.5f, .staircase = true});
    AdamW opt({.learning_rate = lr}); // weight_decay 0.004, epsilon 1e-7: the Keras defaults
    check_golden(opt, ::adamw_defaults_exponential_staircase);
}

BOOST_AUTO_TEST_SUITE_END()

// Schedule values: Keras 3 formulas in double (the schedule functions of tests/golden/optimizers.py).
BOOST_AUTO_TEST_CASE(schedule_values, *boost::unit_test::tolerance(1e-6f)) {
    const ExponentialDecay exp({.initial = 0.1f, .decay_steps = 2, .decay_rate = 0.5f});
    const ExponentialDecay stair({.initial = 0.01f, .decay_steps = 2, .decay_rate = 0.5f, .staircase = true});
    const CosineDecay warm(
        {.initial = 0.0f, .decay_steps = 3, .alpha = 0.1f, .warmup_steps = 2, .warmup_target = 0.02f});
    const CosineDecay plain({.initial = 0.5f, .decay_steps = 4, .alpha = 0.2f});
    const std::vector<float> exp_want{0.1f, 0.0707106781f, 0.05f, 0.0353553391f, 0.025f, 0.0176776695f, 0.0125f};
    const std::vector<float> stair_want{0.01f, 0.01f, 0.005f, 0.005f, 0.0025f, 0.0025f, 0.00125f};
    const std::vector<float> warm_want{0.0f, 0.01f, 0.02f, 0.0155f, 0.0065f, 0.002f, 0.002f, 0.002f};
    const std::vector<float> plain_want{0.5f, 0.441421356f, 0.3f, 0.158578644f, 0.1f, 0.1f};
    for (std::size_t s = 0; s < exp_want.size(); ++s) BOOST_TEST(exp(std::int64_t(s)) == exp_want[s]);
    for (std::size_t s = 0; s < stair_want.size(); ++s) BOOST_TEST(stair(std::int64_t(s)) == stair_want[s]);
    BOOST_TEST(warm(0) == 0.0f); // exactly: relative tolerance says nothing at 0
    for (std::size_t s = 1; s < warm_want.size(); ++s) BOOST_TEST(warm(std::int64_t(s)) == warm_want[s]);
    for (std::size_t s = 0; s < plain_want.size(); ++s) BOOST_TEST(plain(std::int64_t(s)) == plain_want[s]);
    BOOST_TEST(exp.name() == "exponential_decay");
    BOOST_TEST(plain.name() == "cosine_decay");
}

BOOST_AUTO_TEST_CASE(schedule_validation) {
    BOOST_TEST(contains(message_of([] { ExponentialDecay({.initial = 0.1f, .decay_steps = 0}); }), "decay_steps"));
    BOOST_TEST(contains(message_of([] { ExponentialDecay({.decay_rate = -1.0f}); }), "decay_rate"));
    BOOST_TEST(contains(message_of([] { ExponentialDecay({.initial = -0.1f}); }), "initial"));
    BOOST_TEST(contains(message_of([] { CosineDecay({.decay_steps = -3}); }), "decay_steps must be > 0 (got -3)"));
    BOOST_TEST(contains(message_of([] { CosineDecay({.alpha = 1.5f}); }), "alpha"));
    BOOST_TEST(contains(message_of([] { CosineDecay({.warmup_steps = 2}); }), "warmup_target"));
    BOOST_TEST(contains(message_of([] { CosineDecay({.warmup_target = 0.1f}); }), "warmup_steps"));
    BOOST_TEST(contains(message_of([] { LearningRate(std::nanf("")); }), "learning_rate"));
    BOOST_TEST(contains(message_of([] { LearningRate(-1e-3); }), "learning_rate must be finite and >= 0 (got -0.001)"));
    BOOST_TEST(contains(message_of([] { LearningRate(std::shared_ptr<const Schedule>()); }), "null"));
}

// The step counter and the schedule advance once per applied step, never on a rejected call.
BOOST_AUTO_TEST_CASE(iterations_and_schedule_advance_with_applied_steps_only) {
    auto lr = std::make_shared<CosineDecay>(CosineDecay::Options{
        .initial = 0.0f, .decay_steps = 3, .alpha = 0.1f, .warmup_steps = 2, .warmup_target = 0.02f});
    Adam opt({.learning_rate = lr});
    auto vars = make_variables();
    BOOST_TEST(opt.iterations() == 0);
    BOOST_TEST(opt.current_learning_rate() == (*lr)(0));
    for (std::int64_t n = 1; n <= 4; ++n) {
        opt.apply(step_gradients(std::size_t(n - 1)), vars);
        BOOST_TEST(opt.iterations() == n);
        BOOST_TEST(opt.current_learning_rate() == (*lr)(n));
        BOOST_TEST(opt.current_learning_rate() == (*lr)(n)); // reading does not advance
    }
    const std::vector<float> before = weights(vars);
    BOOST_CHECK_THROW(opt.apply({vec({1, 2, 3})}, vars), std::invalid_argument);
    BOOST_TEST(opt.iterations() == 4);
    BOOST_TEST(opt.current_learning_rate() == (*lr)(4));
    BOOST_TEST(weights(vars) == before, tt::per_element());

    opt.set_learning_rate(0.5f);
    BOOST_TEST(opt.current_learning_rate() == 0.5f);
    BOOST_TEST(!opt.learning_rate().schedule());
}

BOOST_AUTO_TEST_CASE(slots_are_aligned_with_variables) {
    Adam adam({.learning_rate = 0.01f});
    BOOST_TEST(adam.slots().empty()); // built on the first step
    auto vars = make_variables();
    adam.apply(step_gradients(0), vars);
    const auto slots = adam.slots();
    BOOST_TEST_REQUIRE(slots.size() == 4u);
    const std::vector<std::string> names{"m", "m", "v", "v"};
    for (std::size_t k = 0; k < 4; ++k) {
        const std::size_t i = k % 2;
        BOOST_TEST(slots[k].name == names[k]);
        BOOST_TEST(slots[k].variable == i);
        BOOST_TEST_REQUIRE(slots[k].values.size() == vars[i].value().size());
        for (std::size_t e = 0; e < slots[k].values.size(); ++e) {
            const float g = gradients[0][i][e];
            // From zero slots, with the coefficients 1 − β formed in double and rounded once (as PyTorch and
            // Keras form them): m = 0 + c1·(g − 0), v = 0 + c2·g·g.
            const float c1 = float(1 - 0.9), c2 = float(1 - 0.999);
            const float want = names[k] == "m" ? c1 * g : c2 * g * g;
            BOOST_TEST(slots[k].values[e] == want);
        }
    }
    BOOST_TEST(adam.kind() == "adam");

    Adam ams({.amsgrad = true});
    ams.apply(step_gradients(0), vars);
    BOOST_TEST(ams.slots().size() == 6u);
    BOOST_TEST(ams.slots()[4].name == "v_max");

    SGD plain;
    plain.apply(step_gradients(0), vars);
    BOOST_TEST(plain.slots().empty());
    SGD momentum({.momentum = 0.9f});
    momentum.apply(step_gradients(0), vars);
    BOOST_TEST(momentum.slots().size() == 2u);
    BOOST_TEST(momentum.slots()[1].name == "momentum");
    BOOST_TEST(AdamW().kind() == "adamw");
    BOOST_TEST(momentum.kind() == "sgd");
}

// What checkpoint loading will do: build, write the slots and the counter, continue.
BOOST_AUTO_TEST_CASE(slots_can_be_restored) {
    auto vars = make_variables();
    Adam original({.learning_rate = 0.01f});
    original.apply(step_gradients(0), vars);
    auto copy_vars = make_variables();
    for (std::size_t i = 0; i < 2; ++i) copy_vars[i].assign(vars[i].value());
    Adam restored({.learning_rate = 0.01f});
    BOOST_CHECK_THROW(restored.slot_data("m", 0), std::invalid_argument);
    restored.build(copy_vars);
    for (const auto& s : original.slots()) {
        auto dst = restored.slot_data(s.name, s.variable);
        std::copy(s.values.begin(), s.values.end(), dst.begin());
    }
    restored.set_iterations(original.iterations());
    original.apply(step_gradients(1), vars);
    restored.apply(step_gradients(1), copy_vars);
    BOOST_TEST(weights(copy_vars) == weights(vars), tt::per_element()); // bit-identical
    BOOST_CHECK_THROW(restored.slot_data("velocity", 0), std::invalid_argument);
    BOOST_CHECK_THROW(restored.slot_data("m", 2), std::invalid_argument);
}

// state() and load_state(): what checkpoints save and put back, for any optimizer.
BOOST_AUTO_TEST_CASE(state_round_trips_and_the_step_after_is_bit_identical) {
    auto vars = make_variables();
    SGD original({.learning_rate = 0.05f, .momentum = 0.9f, .nesterov = true});
    original.apply(step_gradients(0), vars);
    original.apply(step_gradients(1), vars);
    const OptimizerState saved = original.state();
    BOOST_TEST(saved.kind == "sgd");
    BOOST_TEST(saved.iterations == 2);
    BOOST_TEST(saved.built);
    BOOST_TEST(saved.slots.size() == 2u); // the momentum of a and of b
    BOOST_TEST_REQUIRE(saved.values.size() == 1u);
    BOOST_TEST((saved.values[0] == StateValue{"learning_rate", double(0.05f)}));

    auto copy_vars = make_variables();
    for (std::size_t i = 0; i < 2; ++i) copy_vars[i].assign(vars[i].value());
    SGD restored({.learning_rate = 0.05f, .momentum = 0.9f, .nesterov = true});
    restored.load_state(saved, copy_vars);
    BOOST_TEST((restored.state() == saved));
    original.apply(step_gradients(2), vars);
    restored.apply(step_gradients(2), copy_vars);
    BOOST_TEST(weights(copy_vars) == weights(vars), tt::per_element());

    // A state saved before the first step resets a built optimizer's slots to zero.
    SGD fresh({.momentum = 0.9f});
    restored.load_state(fresh.state(), copy_vars);
    BOOST_TEST(restored.iterations() == 0);
    for (const auto& slot : restored.slots())
        for (float x : slot.values) BOOST_TEST(x == 0.0f);
}

// A constant learning rate is part of the state (a callback may have lowered it); a schedule is not.
BOOST_AUTO_TEST_CASE(state_carries_a_constant_learning_rate) {
    auto vars = make_variables();
    Adam lowered({.learning_rate = 1e-3f});
    lowered.apply(step_gradients(0), vars);
    lowered.set_learning_rate(2.5e-4f); // as ReduceLROnPlateau does
    Adam restored({.learning_rate = 1e-3f});
    restored.load_state(lowered.state(), vars);
    BOOST_TEST(restored.current_learning_rate() == 2.5e-4f);
    // A state without a rate (a schedule's, or an older checkpoint's) leaves the rate alone.
    OptimizerState no_rate = lowered.state();
    no_rate.values.clear();
    Adam kept({.learning_rate = 1e-3f});
    kept.load_state(no_rate, vars);
    BOOST_TEST(kept.current_learning_rate() == 1e-3f);
    Adam scheduled({.learning_rate = std::make_shared<ExponentialDecay>(ExponentialDecay::Options{.initial = 1e-3f})});
    BOOST_TEST(scheduled.state().values.empty());
    const std::string message = message_of([&] { scheduled.load_state(lowered.state(), vars); });
    BOOST_TEST(contains(message, "constant learning rate, this optimizer follows the schedule 'exponential_decay'"),
               message);
}

BOOST_AUTO_TEST_CASE(load_state_checks_before_it_changes_anything) {
    auto vars = make_variables();
    Adam amsgrad({.amsgrad = true});
    amsgrad.apply(step_gradients(0), vars);
    Adam target;
    target.apply(step_gradients(0), vars);
    target.apply(step_gradients(1), vars);
    const OptimizerState before = target.state();
    const auto refused = [&](const OptimizerState& s, const std::string& part) {
        const std::string message = message_of([&] { target.load_state(s, vars); });
        BOOST_TEST((target.state() == before));
        return contains(message, part);
    };
    OptimizerState s = before;
    s.kind = "sgd";
    BOOST_TEST(refused(s, "the state is of optimizer 'sgd', this optimizer is 'adam'"));
    BOOST_TEST(refused(amsgrad.state(), "the state has slot 'v_max' of variable 0, the optimizer has not"));
    s = before;
    s.values.push_back({"loss_scale/scale", 8.0});
    BOOST_TEST(refused(s, "value 'loss_scale/scale', which optimizer 'adam' does not keep"));
    s = before;
    s.values[0].value = -1.0;
    BOOST_TEST(refused(s, "learning rate in the state is not a float32 value ≥ 0"));
    s = before;
    s.values[0].value = 0.1; // not a float32
    BOOST_TEST(refused(s, "learning rate in the state is not a float32"));
    s = before;
    s.values[0].value = std::int64_t{1};
    BOOST_TEST(refused(s, "learning rate in the state is not a float32"));
    s = before;
    s.values.push_back(s.values[0]);
    BOOST_TEST(refused(s, "the learning rate twice"));
    s = before;
    s.iterations = -1;
    BOOST_TEST(refused(s, "negative iteration count -1"));
    s = before;
    s.slots[0].values.pop_back();
    BOOST_TEST(refused(s, "slot 'm' of variable 0 has 2 values, variable 'a' 3"));
    s = before;
    s.slots.push_back(s.slots[0]);
    BOOST_TEST(refused(s, "slot 'm' of variable 0 appears twice"));
    s = before;
    s.slots[1].variable = 5;
    BOOST_TEST(refused(s, "slot 'm' of variable 5: there are 2 variables"));
    s = before;
    s.slots.pop_back();
    BOOST_TEST(refused(s, "the optimizer has slot 'v' of variable 1, the state has not"));
    s = before;
    s.built = false;
    BOOST_TEST(refused(s, "never built cannot have slots"));
    BOOST_TEST(refused(before, "")); // and the state itself loads
}

BOOST_AUTO_TEST_CASE(mismatched_counts_and_sizes) {
    SGD opt;
    auto vars = make_variables();
    BOOST_TEST(contains(message_of([&] { opt.apply({vec({1, 2, 3})}, vars); }), "1 gradients for 2 variables"));
    const std::string shape = message_of([&] { opt.apply({vec({1, 2, 3}), vec({1, 2, 3})}, vars); });
    BOOST_TEST(contains(shape, "'b'"));
    BOOST_TEST(contains(shape, "(3)"));
    BOOST_TEST(contains(shape, "(2)"));
    std::vector<std::vector<float>> bad{{1, 2, 3}, {1}};
    const std::string size = message_of([&] { opt.apply_float32(bad, vars); });
    BOOST_TEST(contains(size, "variable 'b' has 1 elements, the variable has 2"));
    BOOST_TEST(opt.iterations() == 0);

    opt.apply(step_gradients(0), vars);
    // Later calls may pass other variables (layers are frozen and unfrozen): each has slots of its own.
    std::vector<Variable> other{Variable(vec({1, 2, 3}), "a"), Variable(vec({1, 2, 3, 4}), "c")};
    BOOST_TEST(opt.apply({vec({1, 2, 3}), vec({1, 2, 3, 4})}, other));
    BOOST_TEST(opt.apply({vec({1, 2, 3})}, {vars[0]}));
    BOOST_TEST(opt.iterations() == 3);
    BOOST_TEST(opt.slot_variables().size() == 4u);
}

namespace {

/// A deterministic gradient for element `e` of variable `i` at step `k`.
Tensor gradient_of(const Variable& v, std::size_t i, std::size_t k) {
    std::vector<float> g(v.value().size());
    for (std::size_t e = 0; e < g.size(); ++e) g[e] = 0.125f * float((k * 7 + i * 3 + e * 5) % 11) - 0.6f;
    return vec(g);
}

std::vector<Variable> four_variables() {
    return {Variable(vec({0.5f, -1.25f, 2.0f}), "a"), Variable(vec({0.75f, -0.3f}), "b"), Variable(vec({1.5f}), "c"),
            Variable(vec({-0.25f, 0.5f, 1.0f, 0.125f}), "d")};
}

/// The values of every slot of variable `v` in `opt`, slot by slot (empty if it has none).
std::vector<std::vector<float>> slots_of(const Optimizer& opt, const Variable& v) {
    const std::vector<Variable> own = opt.slot_variables();
    std::vector<std::vector<float>> out;
    for (const auto& slot : opt.slots())
        if (own.at(slot.variable) == v) out.emplace_back(slot.values.begin(), slot.values.end());
    return out;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

} // namespace

// Freezing changes the list of variables from step to step. Each variable's slots are its own: one left out
// keeps its weights and slots bit for bit, one that comes back continues from its old moments, and one seen
// for the first time starts from zero slots, in any order of the list. The reference steps each variable
// with a single-variable Adam of its own, set to the optimizer's step count first: the learning rate and
// the bias correction follow the optimizer's steps (Keras), not the variable's (PyTorch).
BOOST_AUTO_TEST_CASE(slots_follow_each_variable_when_the_list_of_variables_changes) {
    const auto options = [] {
        return Adam::Options{.learning_rate = std::make_shared<ExponentialDecay>(
                                 ExponentialDecay::Options{.initial = 0.05f, .decay_steps = 2, .decay_rate = 0.5f}),
                             .amsgrad = true};
    };
    std::vector<Variable> vars = four_variables(), ref_vars = four_variables();
    Adam opt(options());
    std::vector<std::unique_ptr<Adam>> refs;
    for (std::size_t i = 0; i < 4; ++i) refs.push_back(std::make_unique<Adam>(options()));
    const std::vector<std::vector<std::size_t>> lists = {
        {0, 1, 2},    {0, 1, 2}, // a, b, c
        {1, 2},                  // a frozen
        {1, 3, 2},    {2, 1, 3}, // d appears, in the middle of the list
        {0, 1, 2, 3},            // a comes back
        {3, 0, 2, 1},            // another order
    };
    for (std::size_t k = 0; k < lists.size(); ++k) {
        BOOST_TEST_CONTEXT("step " << k + 1) {
            std::vector<Tensor> grads;
            std::vector<Variable> list;
            for (std::size_t i : lists[k]) {
                grads.push_back(gradient_of(vars[i], i, k));
                list.push_back(vars[i]);
            }
            std::vector<std::vector<std::vector<float>>> slots_before;
            std::vector<std::vector<float>> weights_before;
            for (const Variable& v : vars) {
                slots_before.push_back(slots_of(opt, v));
                weights_before.push_back(v.value().to_floats());
            }
            BOOST_TEST(opt.apply(grads, list));
            for (std::size_t i : lists[k]) {
                refs[i]->set_iterations(std::int64_t(k));
                refs[i]->apply({gradient_of(ref_vars[i], i, k)}, {ref_vars[i]});
            }
            for (std::size_t i = 0; i < 4; ++i) {
                BOOST_TEST_CONTEXT("variable " << vars[i].name()) {
                    BOOST_TEST(same_bits(vars[i].value().to_floats(), ref_vars[i].value().to_floats()));
                    const auto mine = slots_of(opt, vars[i]), theirs = slots_of(*refs[i], ref_vars[i]);
                    BOOST_TEST_REQUIRE(mine.size() == theirs.size()); // 3 (m, v, v_max), or 0 before first seen
                    for (std::size_t s = 0; s < mine.size(); ++s) BOOST_TEST(same_bits(mine[s], theirs[s]));
                    if (std::find(lists[k].begin(), lists[k].end(), i) == lists[k].end()) {
                        BOOST_TEST(same_bits(vars[i].value().to_floats(), weights_before[i])); // left alone
                        BOOST_TEST_REQUIRE(mine.size() == slots_before[i].size());
                        for (std::size_t s = 0; s < mine.size(); ++s)
                            BOOST_TEST(same_bits(mine[s], slots_before[i][s]));
                    }
                }
            }
        }
    }
    BOOST_TEST(opt.iterations() == 7);
    const std::vector<Variable> own = opt.slot_variables(); // in the order first seen
    BOOST_TEST_REQUIRE(own.size() == 4u);
    for (std::size_t i = 0; i < 4; ++i) BOOST_TEST((own[i] == vars[i]));
    BOOST_TEST(opt.slots().size() == 12u); // m, v, v_max of four variables
}

// A variable passed twice is refused; a refused call changes nothing, not even the slots of a variable it
// would have been the first to pass.
BOOST_AUTO_TEST_CASE(a_variable_passed_twice_is_refused_and_a_refused_call_changes_nothing) {
    auto vars = make_variables();
    Adam opt;
    opt.apply(step_gradients(0), vars);
    const OptimizerState before = opt.state();
    const std::vector<float> w = weights(vars);
    Variable c(vec({1, 2}), "c");
    const auto unchanged = [&] {
        BOOST_TEST((opt.state() == before));
        BOOST_TEST(weights(vars) == w, tt::per_element());
        BOOST_TEST(c.value().to_floats() == std::vector<float>({1, 2}), tt::per_element());
        BOOST_TEST(opt.slot_variables().size() == 2u);
    };
    const Tensor gb = vec({0.5f, 0.5f});
    std::string message = message_of([&] { opt.apply({gb, gb, gb}, {c, vars[1], vars[1]}); });
    BOOST_TEST(contains(message, "Optimizer::apply: variable 'b' is passed twice (positions 1 and 2)"), message);
    unchanged();
    message = message_of([&] { opt.apply({gb, gb, gb}, {vars[1], c, c}); });
    BOOST_TEST(contains(message, "variable 'c' is passed twice (positions 1 and 2)"), message);
    unchanged();
    message = message_of([&] { opt.build({c, vars[0], c}); });
    BOOST_TEST(contains(message, "Optimizer::build: variable 'c' is passed twice (positions 0 and 2)"), message);
    unchanged();
    message = message_of([&] { opt.apply({gb, vec({1, 2, 3})}, {c, vars[1]}); }); // b's gradient has 3 elements
    BOOST_TEST(contains(message, "the gradient of variable 'b' has shape (3), the variable has shape (2)"), message);
    std::vector<std::vector<float>> wide = {{0.5f, 0.5f}, {1, 2, 3}};
    message = message_of([&] { opt.apply_float32(wide, {c, vars[1]}); });
    BOOST_TEST(contains(message, "the gradient of variable 'b' has 3 elements, the variable has 2"), message);
    unchanged();
    // A Variable's shape is fixed for its life (assign checks it), so a known variable never changes its
    // element count; the state of an optimizer can still claim another one, and is refused naming both.
    OptimizerState wrong = before;
    wrong.slots[0].values.push_back(0.0f);
    message = message_of([&] { opt.load_state(wrong, vars); });
    BOOST_TEST(contains(message, "slot 'm' of variable 0 has 4 values, variable 'a' 3"), message);
    unchanged();
    // And the call that was refused goes through once it is right: c gets zero slots, then its step.
    BOOST_TEST(opt.apply({gb, gb}, {c, vars[1]}));
    BOOST_TEST(opt.slot_variables().size() == 3u);
    BOOST_TEST((opt.slot_variables()[2] == c));
}

// state(variables) numbers the slots among the variables given (what checkpoints save, with all the
// model's variables), and load_state takes that back for a subset: slots exactly for the variables that had
// them, each variable's values by identity.
BOOST_AUTO_TEST_CASE(state_among_given_variables_round_trips_with_a_subset) {
    std::vector<Variable> vars = four_variables();
    Adam opt({.learning_rate = 0.01f});
    // a is frozen from the start, d is frozen later: slots for d, c, b (in the order first seen).
    opt.apply({gradient_of(vars[3], 3, 0), gradient_of(vars[2], 2, 0)}, {vars[3], vars[2]});
    opt.apply({gradient_of(vars[1], 1, 1), gradient_of(vars[2], 2, 1)}, {vars[1], vars[2]});
    const OptimizerState own = opt.state();
    const OptimizerState saved = opt.state(vars);
    BOOST_TEST_REQUIRE(saved.slots.size() == 6u);
    const std::vector<std::uint64_t> positions = {3, 2, 1, 3, 2, 1}; // m of d, c, b, then v
    for (std::size_t k = 0; k < 6; ++k) {
        BOOST_TEST(saved.slots[k].variable == positions[k]);
        BOOST_TEST(own.slots[k].variable == k % 3);
        BOOST_TEST(saved.slots[k].values == own.slots[k].values, tt::per_element());
    }
    std::string message = message_of([&] { (void)opt.state({vars[0], vars[1], vars[3]}); });
    BOOST_TEST(contains(message, "Optimizer::state: the optimizer has slots for variable 'c', which is not among "
                                 "the 3 variables given"),
               message);

    // Into a fresh optimizer for copies of all four: slots for the copies of b, c and d only.
    std::vector<Variable> copies = four_variables();
    for (std::size_t i = 0; i < 4; ++i) copies[i].assign(vars[i].value());
    Adam restored({.learning_rate = 0.01f});
    restored.load_state(saved, copies);
    const std::vector<Variable> restored_own = restored.slot_variables();
    BOOST_TEST_REQUIRE(restored_own.size() == 3u);
    BOOST_TEST((restored_own[0] == copies[3] && restored_own[1] == copies[2] && restored_own[2] == copies[1]));
    BOOST_TEST((restored.state() == own));
    BOOST_TEST((restored.state(copies) == saved));
    // Both continue the same, a joining with zero slots and d coming back to its moments.
    for (std::size_t k = 2; k < 4; ++k) {
        std::vector<Tensor> grads, copy_grads;
        for (std::size_t i = 0; i < 4; ++i) {
            grads.push_back(gradient_of(vars[i], i, k));
            copy_grads.push_back(gradient_of(copies[i], i, k));
        }
        opt.apply(grads, vars);
        restored.apply(copy_grads, copies);
        BOOST_TEST(weights(copies) == weights(vars), tt::per_element());
        BOOST_TEST((restored.state(copies) == opt.state(vars)));
    }

    // An optimizer built already must have slots for exactly the variables the state names.
    const auto refused = [&](Adam& target, const std::vector<Variable>& list, const std::string& part) {
        const OptimizerState before = target.state();
        const std::string m = message_of([&] { target.load_state(saved, list); });
        BOOST_TEST((target.state() == before));
        BOOST_TEST(contains(m, part), m);
    };
    Adam all({.learning_rate = 0.01f});
    std::vector<Tensor> zero_grads;
    for (const Variable& v : copies) zero_grads.push_back(Tensor(v.shape()));
    all.apply(zero_grads, copies);
    refused(all, copies, "the optimizer has slot 'm' of variable 0, the state has not (variable 'a')");
    Adam fewer({.learning_rate = 0.01f});
    fewer.apply({zero_grads[1], zero_grads[2]}, {copies[1], copies[2]});
    refused(fewer, copies, "the state has slot 'm' of variable 3, the optimizer has not (variable 'd')");
    Adam stranger({.learning_rate = 0.01f});
    Variable x(vec({1.0f}), "x");
    stranger.apply({vec({0.5f})}, {x});
    refused(stranger, copies, "the optimizer has slots for variable 'x', which is not among the 4 variables given");
    // Two positions of one variable, both with slots.
    OptimizerState twice = saved;
    for (const SlotState& slot : saved.slots)
        if (slot.variable == 1) twice.slots.push_back({slot.name, 4, slot.values});
    std::vector<Variable> with_b_twice = copies;
    with_b_twice.push_back(copies[1]);
    Adam unbuilt({.learning_rate = 0.01f});
    message = message_of([&] { unbuilt.load_state(twice, with_b_twice); });
    BOOST_TEST(contains(message, "variables 1 and 4 are the same variable 'b'"), message);
    BOOST_TEST(!unbuilt.built());
}

// SGD with and without momentum: a state with momentum slots does not fit an SGD without momentum. A state
// without slots names no variable: it fits an SGD with momentum that has no slots yet (its slots then
// start at zero as each variable comes, as they would for a variable never seen), not one that has slots.
BOOST_AUTO_TEST_CASE(sgd_states_with_and_without_momentum) {
    auto vars = make_variables();
    SGD with({.momentum = 0.9f}), without;
    with.apply(step_gradients(0), vars);
    without.apply(step_gradients(0), vars);
    SGD plain;
    std::string message = message_of([&] { plain.load_state(with.state(vars), vars); });
    BOOST_TEST(contains(message, "the state has slot 'momentum' of variable 0, the optimizer has not"), message);
    BOOST_TEST(plain.built()); // left built without slots (SGD without momentum has none), as documented
    BOOST_TEST(plain.iterations() == 0);
    SGD fresh({.momentum = 0.9f});
    fresh.load_state(without.state(vars), vars);
    BOOST_TEST(fresh.built());
    BOOST_TEST(fresh.slots().empty());
    BOOST_TEST(fresh.iterations() == 1);
    const OptimizerState before = with.state();
    message = message_of([&] { with.load_state(without.state(vars), vars); });
    BOOST_TEST(contains(message, "the optimizer has slot 'momentum' of variable 0, the state has not"), message);
    BOOST_TEST((with.state() == before));
}

BOOST_AUTO_TEST_CASE(option_validation) {
    const float inf = std::numeric_limits<float>::infinity();
    BOOST_TEST(contains(message_of([] { SGD({.clip = {.clipnorm = 1.0f, .clipvalue = 1.0f}}); }), "at most one"));
    BOOST_TEST(
        contains(message_of([] { Adam({.clip = {.clipnorm = 1.0f, .global_clipnorm = 1.0f}}); }), "at most one"));
    BOOST_TEST(
        contains(message_of([] { SGD({.clip = {.clipnorm = 0.0f}}); }), "clipnorm must be finite and > 0 (got 0)"));
    BOOST_TEST(contains(message_of([&] { SGD({.clip = {.global_clipnorm = inf}}); }), "global_clipnorm"));
    BOOST_TEST(
        contains(message_of([] { SGD({.clip = {.clipvalue = -1.0f}}); }), "clipvalue must be finite and > 0 (got -1)"));
    BOOST_TEST(contains(message_of([] { SGD({.clip = {.clipvalue = std::nanf("")}}); }), "clipvalue"));
    BOOST_TEST(contains(message_of([] { SGD({.nesterov = true}); }), "nesterov needs momentum > 0"));
    BOOST_TEST(contains(message_of([] { SGD({.momentum = -0.5f}); }), "momentum"));
    BOOST_TEST(contains(message_of([] { SGD({.weight_decay = -1.0f}); }), "weight_decay"));
    BOOST_TEST(contains(message_of([] { SGD({.learning_rate = -0.1f}); }), "learning_rate"));
    BOOST_TEST(contains(message_of([] { Adam({.beta1 = 1.0}); }), "beta1 must be in [0, 1) (got 1)"));
    BOOST_TEST(contains(message_of([] { Adam({.beta2 = -0.1}); }), "beta2"));
    BOOST_TEST(contains(message_of([] { Adam({.epsilon = -1e-8f}); }), "epsilon"));
    BOOST_TEST(contains(message_of([] { AdamW({.weight_decay = -0.1f}); }), "AdamW: weight_decay"));
    Adam ok({.learning_rate = 1e-3, .beta2 = 0.98}); // doubles convert, as in DESIGN.md's example
    BOOST_TEST(ok.options().beta2 == 0.98);
}

// A float16 gradient is widened exactly: the same bits as applying its float32 widening.
BOOST_AUTO_TEST_CASE(float16_gradients_are_widened_exactly) {
    auto half_vars = make_variables(), float_vars = make_variables();
    Adam half_opt({.learning_rate = 0.01f}), float_opt({.learning_rate = 0.01f});
    for (std::size_t step = 0; step < 3; ++step) {
        const auto half = step_gradients(step, Dtype::float16);
        std::vector<Tensor> widened;
        for (const Tensor& g : half) widened.push_back(g.to(Dtype::float32));
        BOOST_TEST(widened[0].to_floats() != gradients[step][0]); // 0.3 etc. are not float16 values
        half_opt.apply(half, half_vars);
        float_opt.apply(widened, float_vars);
        BOOST_TEST(weights(half_vars) == weights(float_vars), tt::per_element());
    }
}

// After apply, read() gives round(master) in the working dtype (the cached copy was invalidated).
BOOST_AUTO_TEST_CASE(read_after_apply_is_rounded_master) {
    auto vars = make_variables();
    for (auto& v : vars) v.set_working_dtype(Dtype::float16);
    const Tensor before = vars[0].read();
    SGD opt({.learning_rate = 0.1f, .momentum = 0.9f});
    for (std::size_t step = 0; step < 3; ++step) {
        opt.apply(step_gradients(step), vars);
        for (const auto& v : vars) {
            const Tensor working = v.read(), rounded = v.value().to(Dtype::float16);
            BOOST_TEST_REQUIRE(working.dtype() == Dtype::float16);
            BOOST_TEST(std::memcmp(working.raw(), rounded.raw(), rounded.nbytes()) == 0);
        }
    }
    BOOST_TEST(std::memcmp(before.raw(), vars[0].read().raw(), before.nbytes()) != 0);
}

// A large variable is updated on every thread, in pieces; a small one on one thread. The update is
// elementwise, so one variable of 200,000 values and the same values as 200 variables of 1,000 end with the
// same bits, for each optimizer and option that changes the loop.
BOOST_AUTO_TEST_CASE(a_large_variable_updated_on_every_thread_matches_it_in_small_pieces) {
    constexpr std::size_t pieces = 200, piece = 1000, n = pieces * piece;
    std::vector<float> start(n), grads[3];
    for (std::size_t i = 0; i < n; ++i) start[i] = std::sin(0.001f * static_cast<float>(i));
    for (std::size_t s = 0; s < 3; ++s) {
        grads[s].resize(n);
        for (std::size_t i = 0; i < n; ++i) grads[s][i] = std::cos(0.0007f * static_cast<float>(i * (s + 1)));
    }
    const auto piece_of = [&](const std::vector<float>& v, std::size_t p) {
        return vec(std::vector<float>(v.begin() + p * piece, v.begin() + (p + 1) * piece));
    };
    const auto check = [&](const char* name, auto make) {
        BOOST_TEST_CONTEXT(name) {
            auto whole_opt = make(), pieces_opt = make();
            std::vector<Variable> whole{Variable(vec(start), "w")}, split;
            for (std::size_t p = 0; p < pieces; ++p) split.emplace_back(piece_of(start, p), "w" + std::to_string(p));
            for (const auto& g : grads) {
                whole_opt.apply({vec(g)}, whole);
                std::vector<Tensor> gs;
                for (std::size_t p = 0; p < pieces; ++p) gs.push_back(piece_of(g, p));
                pieces_opt.apply(gs, split);
            }
            const std::vector<float> got = weights(whole), want = weights(split);
            BOOST_TEST(got != start);
            BOOST_TEST(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0);
        }
    };
    check("adam", [] { return Adam({.learning_rate = 0.01f}); });
    check("adam amsgrad", [] { return Adam({.learning_rate = 0.01f, .amsgrad = true}); });
    check("adamw", [] { return AdamW({.learning_rate = 0.01f, .weight_decay = 0.1f}); });
    check("sgd", [] { return SGD({.learning_rate = 0.1f}); });
    check("sgd nesterov", [] { return SGD({.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true}); });
}
