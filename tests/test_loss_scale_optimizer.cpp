#define BOOST_TEST_MODULE loss_scale_optimizer
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Shape;
using autodiff::Tensor;
using autodiff::Variable;

namespace {

Tensor vec(std::vector<float> v, Dtype dtype = Dtype::float32) {
    return Tensor::from_floats(Shape{v.size()}, v, dtype);
}

std::vector<Variable> variables(Dtype working, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<Variable> vars;
    for (std::size_t n : {5u, 17u, 3u}) {
        std::vector<float> v(n);
        for (auto& x : v) x = d(gen);
        std::string name = "w"; // appended, not "w" + ...: GCC 12 warns falsely (-Wrestrict) on the latter
        name += std::to_string(n);
        vars.emplace_back(vec(v), name);
        vars.back().set_working_dtype(working);
    }
    return vars;
}

std::vector<Tensor> gradients(const std::vector<Variable>& vars, float scale, Dtype dtype, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d(0.0f, 1e-2f);
    std::vector<Tensor> grads;
    for (const auto& v : vars) {
        std::vector<float> g(v.value().size());
        for (auto& x : g) x = d(gen) * scale;
        grads.push_back(vec(g, dtype));
    }
    return grads;
}

/// Every bit of state a step could touch: masters, working copies, inner slots, iterations, lr.
struct Snapshot {
    std::vector<std::vector<float>> masters, working, slots;
    std::int64_t iterations;
    float learning_rate;
    bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const optim::Optimizer& opt, const std::vector<Variable>& vars) {
    Snapshot s{{}, {}, {}, opt.iterations(), opt.current_learning_rate()};
    for (const auto& v : vars) {
        s.masters.push_back(v.value().to_floats());
        s.working.push_back(v.read().to_floats());
    }
    for (const auto& slot : opt.slots()) s.slots.emplace_back(slot.values.begin(), slot.values.end());
    return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::unique_ptr<optim::Optimizer> adam_with_schedule() {
    return std::make_unique<optim::Adam>(optim::Adam::Options{
        .learning_rate = std::make_shared<optim::ExponentialDecay>(
            optim::ExponentialDecay::Options{.initial = 1e-2f, .decay_steps = 1, .decay_rate = 0.9f})});
}

} // namespace

// Keras test_finite_step: gradients are unscaled before the inner optimizer sees them.
BOOST_AUTO_TEST_CASE(keras_finite_and_infinite_step) {
    amp::LossScaleOptimizer opt(std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.5f}),
                                {.initial_scale = 4096});
    std::vector<Variable> vars{Variable(vec({1, 2, 3, 4}))};
    BOOST_TEST(opt.apply({vec({4096, 6 * 4096, 7 * 4096, 2 * 4096})}, vars));
    BOOST_TEST(vars[0].value().to_floats() == (std::vector<float>{0.5f, -1, -0.5f, 3}),
               boost::test_tools::per_element());
    BOOST_TEST(!opt.apply({vec({INFINITY, INFINITY, INFINITY, INFINITY})}, vars)); // test_infinite_step
    BOOST_TEST(vars[0].value().to_floats() == (std::vector<float>{0.5f, -1, -0.5f, 3}),
               boost::test_tools::per_element());
    BOOST_TEST(opt.scale() == 2048.0f);
}

// Invariant 1: a skipped step changes no bit of masters, working copies, Adam m and v, iterations or
// the schedule. One NaN in one element of one gradient is enough to skip.
BOOST_AUTO_TEST_CASE(skipped_step_changes_nothing) {
    for (Dtype dtype : {Dtype::float16, Dtype::bfloat16, Dtype::float32}) {
        amp::LossScaleOptimizer opt(adam_with_schedule(), {.initial_scale = 1024, .growth_interval = 3});
        auto vars = variables(Dtype::float16, 1);
        for (unsigned step = 0; step < 4; ++step)
            BOOST_TEST_REQUIRE(opt.apply(gradients(vars, 1024, dtype, step), vars));
        for (std::size_t which = 0; which < 3; ++which)
            for (float bad : {NAN, INFINITY, -INFINITY}) {
                auto grads = gradients(vars, opt.scale(), dtype, 99);
                grads[which].set({grads[which].size() / 2}, bad);
                const Snapshot before = snapshot(opt, vars);
                const float scale = opt.scale();
                BOOST_TEST(!opt.apply(grads, vars));
                BOOST_TEST(opt.last_step_skipped());
                BOOST_TEST((snapshot(opt, vars) == before));
                BOOST_TEST(opt.scale() == scale * 0.5f);
            }
        BOOST_TEST(opt.skipped_steps() == 9);
        BOOST_TEST(opt.overflow_count() == 9);
        BOOST_TEST(opt.iterations() == 4);
    }
}

// Invariant 2: after every applied step each working copy is round(master), bit for bit.
BOOST_AUTO_TEST_CASE(working_copy_is_rounded_master) {
    for (Dtype working : {Dtype::float16, Dtype::bfloat16, Dtype::cbfloat16}) {
        amp::LossScaleOptimizer opt(adam_with_schedule());
        auto vars = variables(working, 2);
        for (unsigned step = 0; step < 5; ++step) {
            BOOST_TEST_REQUIRE(opt.apply(gradients(vars, opt.scale(), working, step), vars));
            for (const auto& v : vars) {
                const Tensor w = v.read(), expected = v.value().to(working);
                BOOST_TEST_REQUIRE(std::memcmp(w.raw(), expected.raw(), w.nbytes()) == 0);
            }
        }
    }
}

// Invariant 4: clipping sees unscaled gradients — the result equals the plain optimizer with the same
// clipping on gradients that were never scaled.
BOOST_AUTO_TEST_CASE(clipping_sees_unscaled_gradients) {
    for (optim::Clipping clip : {optim::Clipping{.clipnorm = 1e-2f}, optim::Clipping{.global_clipnorm = 1e-2f},
                                 optim::Clipping{.clipvalue = 5e-3f}}) {
        auto scaled_vars = variables(Dtype::float32, 3), plain_vars = variables(Dtype::float32, 3);
        amp::LossScaleOptimizer opt(
            std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f, .clip = clip}),
            {.dynamic = false, .initial_scale = 1024});
        optim::SGD plain({.learning_rate = 0.1f, .clip = clip});
        for (unsigned step = 0; step < 3; ++step) {
            BOOST_TEST_REQUIRE(opt.apply(gradients(scaled_vars, 1024, Dtype::float32, step), scaled_vars));
            plain.apply(gradients(plain_vars, 1, Dtype::float32, step), plain_vars);
        }
        for (std::size_t i = 0; i < 3; ++i) {
            const auto a = scaled_vars[i].value().to_floats(), b = plain_vars[i].value().to_floats();
            for (std::size_t j = 0; j < a.size(); ++j) BOOST_TEST(a[j] == b[j], boost::test_tools::tolerance(1e-6f));
        }
    }
}

// Invariant 5: float32 with a fixed power-of-two scale gives the same bits as the plain optimizer.
BOOST_AUTO_TEST_CASE(fixed_power_of_two_scale_is_bit_identical) {
    for (float scale : {1.0f, 1024.0f}) {
        auto a = variables(Dtype::float32, 4), b = variables(Dtype::float32, 4);
        amp::LossScaleOptimizer opt(adam_with_schedule(), {.dynamic = false, .initial_scale = scale});
        auto plain = adam_with_schedule();
        for (unsigned step = 0; step < 5; ++step) {
            opt.apply(gradients(a, scale, Dtype::float32, step), a);
            plain->apply(gradients(b, 1, Dtype::float32, step), b);
        }
        for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(same_bits(a[i].value().to_floats(), b[i].value().to_floats()));
        BOOST_TEST((snapshot(opt, a).slots == snapshot(*plain, b).slots));
    }
}

// PyTorch _run_scaling_case: init 128, growth 2, interval 1, one skipped step among four; the weights
// equal a float32 control run that skips the same step, and the scale ends at 128·2³·0.5.
BOOST_AUTO_TEST_CASE(pytorch_scaling_case) {
    amp::LossScaleOptions o = amp::loss_scale_preset("pytorch");
    o.initial_scale = 128;
    o.growth_interval = 1;
    amp::LossScaleOptimizer opt(
        std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f, .momentum = 0.9f}), o);
    optim::SGD control({.learning_rate = 0.1f, .momentum = 0.9f});
    auto a = variables(Dtype::float32, 5), b = variables(Dtype::float32, 5);
    for (unsigned step = 0; step < 4; ++step) {
        auto grads = gradients(a, opt.scale(), Dtype::float32, step);
        if (step == 2)
            grads[1].set({0}, INFINITY);
        else
            control.apply(gradients(b, 1, Dtype::float32, step), b);
        opt.apply(grads, a);
    }
    BOOST_TEST(opt.scale() == 512.0f);
    BOOST_TEST(opt.growth_count() == 3);
    for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(same_bits(a[i].value().to_floats(), b[i].value().to_floats()));
}

// PyTorch test_grad_scaling_unscale: gradients of 4.0 under a scale of 4 reach the optimizer as 1.0, and
// one inf or NaN anywhere (any variable, any position, any gradient dtype) is found and skips the step.
BOOST_AUTO_TEST_CASE(pytorch_unscale_finds_one_inf_or_nan_anywhere) {
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
        std::vector<Variable> vars{Variable(vec({0, 0, 0}), "a"), Variable(vec({0, 0}), "b")};
        amp::LossScaleOptimizer opt(std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 1.0f}),
                                    {.dynamic = false, .initial_scale = 4});
        BOOST_TEST(opt.apply({vec({4, 4, 4}, dtype), vec({4, 4}, dtype)}, vars));
        BOOST_TEST(vars[0].value().to_floats() == (std::vector<float>{-1, -1, -1}), boost::test_tools::per_element());
        BOOST_TEST(vars[1].value().to_floats() == (std::vector<float>{-1, -1}), boost::test_tools::per_element());
        for (float bad : {INFINITY, -INFINITY, NAN})
            for (std::size_t v = 0; v < 2; ++v)
                for (std::size_t e = 0; e < vars[v].value().size(); ++e) {
                    std::vector<Tensor> grads{vec({4, 4, 4}, dtype), vec({4, 4}, dtype)};
                    grads[v].set({e}, bad);
                    BOOST_TEST(!opt.apply(grads, vars));
                    BOOST_TEST(vars[v].value().to_floats()[e] == -1.0f); // nothing applied
                }
    }
}

// Gradient accumulation: two micro-batches summed and unscaled once equal one step with the sum.
BOOST_AUTO_TEST_CASE(gradient_accumulation) {
    auto a = variables(Dtype::float32, 6), b = variables(Dtype::float32, 6);
    amp::LossScaleOptimizer acc(std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f}),
                                {.initial_scale = 256});
    amp::LossScaleOptimizer once(std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f}),
                                 {.initial_scale = 256});
    const auto g1 = gradients(a, 256, Dtype::float16, 1), g2 = gradients(a, 256, Dtype::float16, 2);
    acc.accumulate(g1);
    acc.accumulate(g2);
    BOOST_TEST(acc.accumulated_micro_batches() == 2u);
    BOOST_TEST(acc.apply_accumulated(a));
    std::vector<Tensor> sum;
    for (std::size_t i = 0; i < 3; ++i)
        sum.push_back(autodiff::kernels::add(g1[i].to(Dtype::float32), g2[i].to(Dtype::float32)));
    BOOST_TEST(once.apply(sum, b));
    for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(same_bits(a[i].value().to_floats(), b[i].value().to_floats()));
    BOOST_TEST(acc.iterations() == 1);
    auto bad = gradients(a, 256, Dtype::float16, 3);
    bad[0].set({0}, INFINITY);
    acc.accumulate(gradients(a, 256, Dtype::float16, 4));
    acc.accumulate(bad);
    BOOST_TEST(!acc.apply_accumulated(a)); // an inf in any micro-batch survives the sum
    BOOST_CHECK_THROW(acc.apply_accumulated(a), std::logic_error);
}

// Telemetry and read-through hyper-parameters; misuse is refused clearly.
BOOST_AUTO_TEST_CASE(telemetry_and_errors) {
    amp::LossScaleOptimizer opt(adam_with_schedule(), {.initial_scale = 8, .growth_interval = 2});
    auto vars = variables(Dtype::float32, 7);
    const float lr0 = opt.current_learning_rate();
    opt.apply(gradients(vars, 8, Dtype::float32, 1), vars);
    opt.apply(gradients(vars, 8, Dtype::float32, 2), vars);
    BOOST_TEST(opt.scale() == 16.0f);
    BOOST_TEST(opt.growth_count() == 1);
    BOOST_TEST(opt.iterations() == 2);
    BOOST_TEST(opt.current_learning_rate() == lr0 * 0.9f * 0.9f, boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(opt.last_gradient_norm() > 0.0);
    BOOST_TEST(opt.kind() == "loss_scale(adam)");
    BOOST_TEST(opt.scale_loss(Tensor::full(Shape{}, 0.5f)).flat(0) == 8.0f);
    BOOST_CHECK_THROW(opt.apply(gradients(vars, 1, Dtype::float32, 3), {vars[0]}), std::invalid_argument);
    BOOST_CHECK_THROW(amp::LossScaleOptimizer(nullptr), std::invalid_argument);
    BOOST_CHECK_THROW(amp::LossScaleOptimizer(std::make_unique<amp::LossScaleOptimizer>(adam_with_schedule())),
                      std::invalid_argument);
}

// The same pass at every instruction-set level, past the size where results are streamed to memory, into an output
// that starts off a 64-byte boundary: the same values and norm everywhere, and a result that overflows
// to infinity (a finite gradient times a large 1/S) or an inf in the gradient is caught in the unaligned
// head, the streamed middle and the tail.
BOOST_AUTO_TEST_CASE(fused_unscale_pass_on_every_path_and_size) {

    constexpr std::size_t n = (std::size_t{1} << 21) + 5;
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = float(int(i % 7) - 3) * 8.0f; // squares sum exactly in float
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
        const Tensor g = vec(v, dtype);
        std::vector<float> storage(n + 1);
        const std::span<float> out(storage.data() + 1, n);
        for (autodiff::Isa p : autodiff::available_isas()) {
            autodiff::set_isa(p);
            std::fill(storage.begin(), storage.end(), -1.0f);
            const auto r = amp::unscale(g, 1.0f / 8, out);
            BOOST_TEST_REQUIRE(r.finite);
            double norm = 0;
            for (std::size_t i = 0; i < n; ++i) {
                BOOST_TEST_REQUIRE(out[i] == float(int(i % 7) - 3));
                norm += double(out[i]) * out[i];
            }
            BOOST_TEST(r.squared_norm == norm);
            BOOST_TEST(storage[0] == -1.0f);                    // nothing written before the output
            BOOST_TEST(!amp::unscale(g, 0x1p127f, out).finite); // 24 * 2^127 overflows
            for (std::size_t pos : {std::size_t{2}, n / 2 + 3, n - 1}) {
                std::vector<float> w(v);
                w[pos] = -INFINITY;
                BOOST_TEST_REQUIRE(!amp::unscale(vec(w, dtype), 1.0f / 8, out).finite);
            }
        }
    }
    autodiff::set_isa(autodiff::max_isa());
}

namespace {
/// n floats in `storage` starting `offset` floats past a 64-byte boundary.
std::span<float> placed(std::vector<float>& storage, std::size_t n, std::size_t offset) {
    storage.assign(n + 16 + offset, -1.0f);
    const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
    return {storage.data() + (64 - address % 64) % 64 / sizeof(float) + offset, n};
}
} // namespace

// The unscale pass spreads a large gradient's chunks over the threads and adds their squares in chunk order,
// and results past the caches are streamed as the output's alignment allows: on one thread and on two,
// into an output on a 64-byte boundary, 16 bytes off it and 12 bytes off it, at every level and every
// dtype, the same values, the same norm to the bit and the same finite check.
BOOST_AUTO_TEST_CASE(unscale_pass_gives_the_same_bits_on_any_thread_count_and_alignment) {
    const int threads = omp_get_max_threads();
    std::mt19937 gen(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (std::size_t n : {std::size_t{100'003}, (std::size_t{1} << 20) + 77}) {
        std::vector<float> g(n);
        for (float& v : g) v = normal(gen);
        for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
            const Tensor grad = Tensor::from_floats(Shape{n}, g, dtype);
            for (autodiff::Isa level : autodiff::available_isas()) {
                autodiff::set_isa(level);
                omp_set_num_threads(1);
                std::vector<float> first_storage;
                const std::span<float> first = placed(first_storage, n, 0);
                const amp::UnscaleResult expected = amp::unscale(grad, 0.125f, first);
                std::vector<float> expected_in_place = g;
                const double in_place_norm = amp::unscale_in_place(expected_in_place, 0.125f).squared_norm;
                BOOST_TEST_REQUIRE(expected.finite);
                for (int t : {1, 2})
                    for (std::size_t offset : {0, 4, 3}) {
                        omp_set_num_threads(t);
                        std::vector<float> storage, in_place = g;
                        const std::span<float> out = placed(storage, n, offset);
                        const amp::UnscaleResult r = amp::unscale(grad, 0.125f, out);
                        const amp::UnscaleResult r_in_place = amp::unscale_in_place(in_place, 0.125f);
                        BOOST_TEST_CONTEXT(n << " " << dtype << " " << autodiff::name_of(level) << ", " << t
                                             << " threads, " << offset << " floats off 64 bytes") {
                            BOOST_TEST(r.finite);
                            BOOST_TEST(std::memcmp(&r.squared_norm, &expected.squared_norm, sizeof(double)) == 0);
                            BOOST_TEST(std::equal(out.begin(), out.end(), first.begin()));
                            BOOST_TEST(std::memcmp(&r_in_place.squared_norm, &in_place_norm, sizeof(double)) == 0);
                            BOOST_TEST((in_place == expected_in_place));
                        }
                    }
            }
            std::vector<float> w = g;
            w[n - 5] = NAN; // in the last chunk, on the second thread when there are two
            std::vector<float> out(n);
            for (int t : {1, 2}) {
                omp_set_num_threads(t);
                BOOST_TEST(!amp::unscale(Tensor::from_floats(Shape{n}, w, dtype), 1.0f, out).finite);
            }
        }
    }
    omp_set_num_threads(threads);
    autodiff::set_isa(autodiff::max_isa());
}

// The fused unscale pass: values, norm and the finite check at every position and length.
BOOST_AUTO_TEST_CASE(fused_unscale_pass) {
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
        std::vector<float> v(1000);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 37) - 18) * 64.0f;
        const Tensor g = vec(v, dtype);
        std::vector<float> out(v.size());
        const auto r = amp::unscale(g, 1.0f / 64, out);
        double norm = 0;
        for (std::size_t i = 0; i < v.size(); ++i) {
            BOOST_TEST_REQUIRE(out[i] == float(int(i % 37) - 18));
            norm += double(out[i]) * out[i];
        }
        BOOST_TEST(r.finite);
        BOOST_TEST(r.squared_norm == norm);
        for (std::size_t n : {1u, 7u, 16u, 33u, 1000u})
            for (std::size_t pos = 0; pos < n; pos += std::max<std::size_t>(1, n / 5)) {
                std::vector<float> w(n, 1.0f);
                w[pos] = NAN;
                std::vector<float> o(n);
                BOOST_TEST_REQUIRE(!amp::unscale(vec(w, dtype), 0.5f, o).finite);
            }
    }
}

// The loss scaler's options, state and counters travel in Optimizer::state() as named values, so that a
// checkpoint saves and restores them without knowing the optimizer scales.
BOOST_AUTO_TEST_CASE(state_carries_the_scaler_and_the_run_continues_bit_identically) {
    amp::LossScaleOptions options = amp::loss_scale_preset("pytorch");
    options.initial_scale = 1024;
    options.growth_interval = 2;
    amp::LossScaleOptimizer opt(adam_with_schedule(), options);
    auto vars = variables(Dtype::float16, 4);
    for (unsigned step = 0; step < 5; ++step) {
        auto grads = gradients(vars, opt.scale(), Dtype::float16, step);
        if (step == 3) grads[1].set({2}, INFINITY);
        opt.apply(grads, vars);
    }
    const optim::OptimizerState saved = opt.state();
    BOOST_TEST(saved.kind == "loss_scale(adam)");
    BOOST_TEST(saved.iterations == 4);
    BOOST_TEST(saved.slots.size() == 6u); // Adam's m and v of three variables
    BOOST_TEST(saved.values.size() == 26u);
    for (const auto& v : saved.values) BOOST_TEST(v.name.starts_with(amp::loss_scale_prefix), v.name);
    const amp::LossScaleSnapshot snap = amp::loss_scale_snapshot(saved.values);
    BOOST_TEST((snap.state == opt.loss_scale().state()));
    BOOST_TEST((snap.options.rule == amp::ScaleRule::pytorch));
    BOOST_TEST(snap.options.growth_interval == 2);
    BOOST_TEST(snap.skipped_steps == 1);
    BOOST_TEST(snap.last_gradient_norm == opt.last_gradient_norm());

    auto copy = variables(Dtype::float16, 99);
    for (std::size_t i = 0; i < vars.size(); ++i) copy[i].assign(vars[i].value());
    amp::LossScaleOptimizer restored(adam_with_schedule()); // default options: the state brings them
    restored.load_state(saved, copy);
    BOOST_TEST((restored.state() == saved));
    for (unsigned step = 5; step < 9; ++step) {
        opt.apply(gradients(vars, opt.scale(), Dtype::float16, step), vars);
        restored.apply(gradients(copy, restored.scale(), Dtype::float16, step), copy);
    }
    BOOST_TEST((snapshot(restored, copy) == snapshot(opt, vars)));
    BOOST_TEST((restored.state() == opt.state()));
}

// A rising floor travels with the options, the update count with the state; a checkpoint saved before
// the count existed reads as 0 updates; entries with a value missing or out of order are refused.
BOOST_AUTO_TEST_CASE(a_rising_floor_travels_in_the_state) {
    amp::LossScaleOptimizer opt(adam_with_schedule(),
                                {.initial_scale = 64, .growth_interval = 2, .min_scale_schedule = {{0, 2}, {3, 128}}});
    auto vars = variables(Dtype::float16, 4);
    for (unsigned step = 0; step < 4; ++step) opt.apply(gradients(vars, opt.scale(), Dtype::float16, step), vars);
    const std::vector<optim::StateValue> values = opt.state().values;
    const amp::LossScaleSnapshot snap = amp::loss_scale_snapshot(values);
    BOOST_TEST(snap.state.updates == 4);
    BOOST_TEST(snap.options.min_scale_schedule.size() == 2u);
    BOOST_TEST((snap.options.min_scale_schedule[1] == amp::MinScaleStep{3, 128}));
    const auto without = [&](std::string_view name) {
        std::vector<optim::StateValue> v;
        for (const auto& x : values)
            if (x.name != name) v.push_back(x);
        return v;
    };
    BOOST_TEST(amp::loss_scale_snapshot(without("loss_scale/updates")).state.updates == 0);
    const auto refused = [](const std::vector<optim::StateValue>& v, const std::string& part) {
        try {
            amp::loss_scale_snapshot(v);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what()).find(part) != std::string::npos;
        }
        return false;
    };
    BOOST_TEST(refused(without("loss_scale/min_scale_schedule/1/scale"), "min_scale_schedule/1/scale' is missing"));
    BOOST_TEST(refused(without("loss_scale/min_scale_schedule/0/step"), "min_scale_schedule/0/step' is missing"));
    std::vector<optim::StateValue> swapped = values;
    for (auto& v : swapped)
        if (v.name == "loss_scale/min_scale_schedule/1/step") v.value = std::int64_t{0};
    BOOST_TEST(refused(swapped, "min_scale_schedule[1].step"));
    std::vector<optim::StateValue> gap = without("loss_scale/min_scale_schedule/1/step");
    std::erase_if(gap, [](const auto& v) { return v.name == "loss_scale/min_scale_schedule/1/scale"; });
    gap.push_back({"loss_scale/min_scale_schedule/2/step", std::int64_t{9}});
    BOOST_TEST(refused(gap, "is not one a LossScaleOptimizer keeps"));
}

BOOST_AUTO_TEST_CASE(load_state_refuses_bad_scaler_values_and_changes_nothing) {
    amp::LossScaleOptimizer target(adam_with_schedule(), {.initial_scale = 64, .growth_interval = 2});
    auto vars = variables(Dtype::float32, 5);
    target.apply(gradients(vars, 64, Dtype::float32, 1), vars);
    const optim::OptimizerState before = target.state();
    const auto refused = [&](const optim::OptimizerState& s, std::initializer_list<const char*> parts) {
        std::string message;
        try {
            target.load_state(s, vars);
        } catch (const std::invalid_argument& e) {
            message = e.what();
        }
        BOOST_TEST((target.state() == before));
        bool all = !message.empty();
        for (const char* part : parts) all = all && message.find(part) != std::string::npos;
        BOOST_TEST_MESSAGE(message);
        return all;
    };
    const auto with = [&](std::string_view name, optim::StateValue::Value value) {
        optim::OptimizerState s = before;
        for (auto& v : s.values)
            if (v.name == name) v.value = value;
        return s;
    };
    optim::OptimizerState s = before;
    s.values.erase(s.values.begin() + 13); // "loss_scale/scale"
    BOOST_TEST(refused(s, {"'loss_scale/scale' is missing"}));
    s = before;
    s.values.push_back(s.values[0]);
    BOOST_TEST(refused(s, {"'loss_scale/rule' appears twice"}));
    s = before;
    s.values.push_back({"loss_scale/colour", std::int64_t{3}});
    BOOST_TEST(refused(s, {"'loss_scale/colour' is not one a LossScaleOptimizer keeps"}));
    s = before;
    s.values.push_back({"momentum_decay", 0.5});
    BOOST_TEST(refused(s, {"value 'momentum_decay'", "which optimizer 'adam' does not keep"}));
    BOOST_TEST(refused(with("loss_scale/scale", std::int64_t{8}), {"'loss_scale/scale' is an integer"}));
    BOOST_TEST(refused(with("loss_scale/growths", 2.0), {"'loss_scale/growths' is a real"}));
    BOOST_TEST(refused(with("loss_scale/min_scale", 0.1), {"'loss_scale/min_scale'", "not a float32"}));
    BOOST_TEST(refused(with("loss_scale/rule", std::int64_t{99}), {"'loss_scale/rule'", "unknown value 99"}));
    BOOST_TEST(refused(with("loss_scale/at_min_scale", std::int64_t{-1}), {"'loss_scale/at_min_scale'"}));
    BOOST_TEST(refused(with("loss_scale/dynamic", std::int64_t{2}), {"'loss_scale/dynamic'", "0 or 1, got 2"}));
    BOOST_TEST(refused(with("loss_scale/growth_factor", 0.5), {"invalid loss scale", "growth_factor"}));
    BOOST_TEST(refused(with("loss_scale/scale", double(INFINITY)), {"invalid loss scale", "state.scale"}));
    BOOST_TEST(refused(with("loss_scale/skipped_steps", std::int64_t{-2}), {"'loss_scale/skipped_steps' is negative"}));
    // The inner optimizer refuses after the scaler's values passed: the scaler is left as it was too.
    s = with("loss_scale/scale", 2.0);
    s.slots[0].values.pop_back();
    BOOST_TEST(refused(s, {"slot 'm' of variable 0 has 4 values"}));
    s = before;
    s.kind = "loss_scale(sgd)";
    BOOST_TEST(refused(s, {"'loss_scale(sgd)'", "'loss_scale(adam)'"}));
}

// Frozen variables through the loss scaler: the inner optimizer keeps slots per variable, a skipped step on a
// subset changes nothing, slot_variables() and state(variables) read through, and load_state takes a subset.
BOOST_AUTO_TEST_CASE(a_subset_of_the_variables_steps_and_the_others_keep_their_slots) {
    amp::LossScaleOptimizer opt(adam_with_schedule(), {.initial_scale = 256, .growth_interval = 100});
    auto vars = variables(Dtype::float16, 7); // w5, w17, w3
    BOOST_TEST(opt.apply(gradients(vars, opt.scale(), Dtype::float16, 1), vars));
    const std::vector<Variable> subset = {vars[2], vars[0]}; // w17 frozen, and another order
    const auto w17_slots = [&] {
        std::vector<std::vector<float>> out;
        for (const auto& slot : opt.slots())
            if (slot.variable == 1) out.emplace_back(slot.values.begin(), slot.values.end());
        return out;
    };
    const auto kept = w17_slots();
    const std::vector<float> kept_w17 = vars[1].value().to_floats();
    auto grads = gradients(subset, opt.scale(), Dtype::float16, 2);
    grads[1].set({1}, INFINITY);
    const Snapshot before = snapshot(opt, vars);
    BOOST_TEST(!opt.apply(grads, subset)); // skipped: nothing changes
    BOOST_TEST((snapshot(opt, vars) == before));
    BOOST_TEST(opt.apply(gradients(subset, opt.scale(), Dtype::float16, 3), subset));
    BOOST_TEST(opt.iterations() == 2);
    BOOST_TEST(w17_slots() == kept);
    BOOST_TEST(same_bits(vars[1].value().to_floats(), kept_w17));

    const std::vector<Variable> own = opt.slot_variables();
    BOOST_TEST_REQUIRE(own.size() == 3u);
    for (std::size_t i = 0; i < 3; ++i) BOOST_TEST((own[i] == vars[i]));
    const std::vector<Variable> reversed = {vars[2], vars[1], vars[0]};
    const optim::OptimizerState among_reversed = opt.state(reversed);
    BOOST_TEST(among_reversed.kind == "loss_scale(adam)");
    BOOST_TEST(among_reversed.values == opt.state().values);
    BOOST_TEST_REQUIRE(among_reversed.slots.size() == 6u);
    for (std::size_t k = 0; k < 6; ++k) BOOST_TEST(among_reversed.slots[k].variable == 2 - k % 3);

    // A state whose slots name only w3 and w5 (w17 frozen since the start of the run that saved it).
    amp::LossScaleOptimizer partial(adam_with_schedule());
    auto copies = variables(Dtype::float16, 7);
    partial.apply(gradients({copies[0], copies[2]}, partial.scale(), Dtype::float16, 4), {copies[0], copies[2]});
    const optim::OptimizerState saved = partial.state(copies);
    amp::LossScaleOptimizer restored(adam_with_schedule());
    auto others = variables(Dtype::float16, 7);
    restored.load_state(saved, others);
    const std::vector<Variable> restored_own = restored.slot_variables();
    BOOST_TEST_REQUIRE(restored_own.size() == 2u);
    BOOST_TEST((restored_own[0] == others[0] && restored_own[1] == others[2]));
    BOOST_TEST((restored.state(others) == saved));
    BOOST_TEST(restored.scale() == partial.scale());
}

// The unscale pass on its own, at every length around its 16-lane blocks and chunks: each value is
// grad · (1/S) exactly, the squared norm is the float32 squares' sum (each lane sums at most n/16 squares
// in float: relative error ≤ (n/16 + 1) 2^-24 against double), and one inf or NaN anywhere is found.
BOOST_AUTO_TEST_CASE(unscale_pass_scales_sums_and_checks_every_length) {
    std::mt19937 gen(11);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (std::size_t n : {0, 1, 15, 16, 17, 31, 32, 33, 100, 4095, 4096, 4097, 10000}) {
        std::vector<float> g(n);
        for (float& v : g) v = normal(gen);
        for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
            const Tensor grad = Tensor::from_floats(Shape{n}, g, dtype);
            const std::vector<float> stored = grad.to_floats();
            std::vector<float> out(n);
            const amp::UnscaleResult r = amp::unscale(grad, 0.25f, out);
            double squares = 0;
            bool exact = true;
            for (std::size_t i = 0; i < n; ++i) {
                exact = exact && out[i] == stored[i] * 0.25f;
                squares += double(out[i]) * out[i];
            }
            BOOST_TEST_CONTEXT(n << " " << dtype) {
                BOOST_TEST(r.finite);
                BOOST_TEST(exact);
                BOOST_TEST(std::fabs(r.squared_norm - squares) <= squares * (double(n) / 16 + 1) * 0x1p-24);
            }
        }
        for (std::size_t bad : {std::size_t{0}, n / 2, n - 1}) {
            if (n == 0) break;
            for (float special : {INFINITY, -INFINITY, NAN}) {
                std::vector<float> h = g;
                h[bad] = special;
                BOOST_TEST(!amp::unscale_in_place(h, 0.5f).finite, n << " " << bad << " " << special);
            }
        }
    }
}
