// Data-parallel training over MPI, run by ctest under `mpirun -np 2`: the collectives, gradients that
// equal one process's bit for bit where the arithmetic is exact, steps skipped on every rank when one rank
// overflows, per-layer and FP8 scales kept identical across ranks, and evaluation shared out.
#define BOOST_TEST_MODULE data_parallel
#include <boost/test/unit_test.hpp>

#include <mixprec/amp/loss_scale_optimizer.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/models/dist/mpi_communicator.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/training/fit.hpp>
#include <mixprec/optim/adam.hpp>
#include <mixprec/optim/sgd.hpp>

#include "blobs.hpp"
#include "policy_guard.hpp"

#include <cmath>
#include <memory>

using namespace mixprec;
using autodiff::Shape;
using autodiff::Tensor;
using test_data::PolicyGuard;

namespace {

/// MPI for the whole test program: initialized before the first case, finalized after the last.
struct World {
    std::shared_ptr<models::MpiCommunicator> mpi = std::make_shared<models::MpiCommunicator>();
};
World& world() {
    static World w;
    return w;
}
std::shared_ptr<models::MpiCommunicator> comm() { return world().mpi; }

/// Records every step's logs.
struct StepRecorder final : models::Callback {
    void on_step_end(models::FitContext&, const models::StepLogs& logs) override { steps.push_back(logs); }
    std::vector<models::StepLogs> steps;
};

bool all_equal(const std::vector<std::uint64_t>& digests) {
    return !digests.empty() && std::equal(digests.begin() + 1, digests.end(), digests.begin());
}

/// Small integers in, small integers out: every product and sum of one step is exact in float32 (and
/// float16), so the average of the ranks' gradients is the one process's gradient bit for bit.
models::TensorDataset integer_data(std::size_t n) {
    std::vector<float> x(n * 6), y(n * 2);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7 + 3) % 5) - 2; // -2 ... 2
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = float((i * 3 + 1) % 7) - 3; // -3 ... 3
    return {Tensor::from_floats(Shape{n, 6}, x), Tensor::from_floats(Shape{n, 2}, y)};
}

models::Sequential integer_model() {
    models::Sequential model;
    model.add(models::Dense(2));
    model.build(Shape{6}, 1);
    for (autodiff::Variable v : model.variables()) { // weights k/4, k in -3 ... 3
        std::vector<float> w(v.value().size());
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 5 % 7) - 3) / 4;
        v.assign(Tensor::from_floats(v.value().shape(), w));
    }
    return model;
}

/// The weights after `steps` SGD steps over `data` in batches of `batch`, with or without the ranks.
std::string integer_run(const models::Dataset& data, std::size_t batch, std::int64_t steps, bool parallel, float scale,
                        amp::GradientTransport transport = amp::GradientTransport::float32) {
    models::Sequential model = integer_model();
    amp::LossScaleOptions fixed;
    fixed.dynamic = false;
    fixed.initial_scale = scale;
    amp::LossScaleOptimizer opt(std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 1.0f / 64}), fixed);
    if (parallel) opt.set_communicator(comm(), {.transport = transport});
    models::TrainingState state;
    models::fit(model, opt, data, state,
                {.epochs = 100,
                 .batch_size = batch,
                 .shuffle = false,
                 .max_steps = steps,
                 .loss = "mse",
                 .metrics = std::vector<models::Metric>{}});
    return models::weights_digest(model.variables());
}

} // namespace

BOOST_AUTO_TEST_CASE(the_job_has_two_ranks) {
    BOOST_TEST_REQUIRE(comm()->size() == 2); // ctest runs this program under mpirun -np 2
    BOOST_TEST(models::MpiCommunicator::launched());
}

BOOST_AUTO_TEST_CASE(collectives_give_every_rank_the_same_result) {
    const int r = comm()->rank();
    std::vector<float> f{1.5f + float(r), -2.0f * float(r), 1e30f};
    comm()->sum(std::span(f));
    BOOST_TEST(f == (std::vector<float>{4.0f, -2.0f, 2e30f}), boost::test_tools::per_element());
    std::vector<double> d{0.25 * (r + 1)};
    comm()->sum(std::span(d));
    BOOST_TEST(d[0] == 0.75);
    std::vector<float> m{float(r), -float(r), 3.0f};
    comm()->max(std::span(m));
    BOOST_TEST(m == (std::vector<float>{1.0f, 0.0f, 3.0f}), boost::test_tools::per_element());
    BOOST_TEST(comm()->gather(100 + r) == (std::vector<std::uint64_t>{100, 101}), boost::test_tools::per_element());
    // 16-bit sums round each addition once: 1 + 2^-11 is a tie in float16 and goes to even (1).
    for (autodiff::Dtype dtype : {autodiff::Dtype::float16, autodiff::Dtype::bfloat16, autodiff::Dtype::cbfloat16}) {
        const std::vector<float> mine{r == 0 ? 1.0f : 0x1p-11f, 65504.0f, -3.0f, 0.1f * float(r + 1)};
        std::vector<std::uint16_t> bits(mine.size()), zero_bits(mine.size()), one_bits(mine.size());
        autodiff::narrow(mine.data(), bits.data(), mine.size(), dtype);
        comm()->sum(std::span(bits), dtype);
        // Both ranks' operands, rounded alike, added here as the reduction does.
        std::vector<float> zero{1.0f, 65504.0f, -3.0f, 0.1f}, one{0x1p-11f, 65504.0f, -3.0f, 0.2f};
        autodiff::narrow(zero.data(), zero_bits.data(), zero.size(), dtype);
        autodiff::narrow(one.data(), one_bits.data(), one.size(), dtype);
        optim::add_16_bit(zero_bits.data(), one_bits.data(), one_bits.size(), dtype);
        BOOST_TEST(bits == one_bits, boost::test_tools::per_element());
    }
    std::vector<std::uint16_t> bits(3);
    BOOST_CHECK_THROW(comm()->sum(std::span(bits), autodiff::Dtype::float8_e4m3), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(exact_gradients_average_to_one_process_bit_for_bit) {
    // 9 examples in batches of 4: shares 2 + 2, 2 + 2 and, for the last one, 0 + 1 (weights 0 and 2).
    const models::TensorDataset data = integer_data(9);
    for (const char* policy : {"float32", "mixed_float16"}) {
        PolicyGuard guard(policy);
        const float scale = policy[0] == 'f' ? 1.0f : 16.0f;
        // In float16 only the first step is exact: from the second on, the working copies carry 11-bit
        // weights, and each rank's float16 gradient rounds its share's sum where one process rounds the
        // whole batch's (float32 keeps all 3 steps exact, the last with shares of 0 and 1 examples).
        for (std::int64_t steps : {1, 3}) {
            if (scale != 1.0f && steps > 1) continue;
            BOOST_TEST_CONTEXT(policy << ", " << steps << " steps") {
                const std::string one = integer_run(data, 4, steps, false, scale);
                BOOST_TEST(integer_run(data, 4, steps, true, scale) == one);
                BOOST_TEST(integer_run(data, 4, steps, true, scale, amp::GradientTransport::compute) == one);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(an_inf_on_one_rank_skips_the_step_on_every_rank) {
    PolicyGuard guard("mixed_float16");
    const auto data = test_data::blobs(256, 1);
    models::Sequential model;
    model.add(models::Dense(16, "relu"));
    model.add(models::Dense(3));
    model.build(Shape{8}, 42);
    amp::LossScaleOptions scale;
    scale.initial_scale = 1024;
    amp::LossScaleOptimizer opt(std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}), scale);
    opt.set_communicator(comm());
    StepRecorder recorder;
    models::FitOptions options{.epochs = 1, .batch_size = 32, .seed = 5, .callbacks = {&recorder}};
    options.gradient_hook = [](std::int64_t step, std::vector<Tensor>& grads) {
        if (step != 3 || comm()->rank() != 1) return;
        std::vector<float> values = grads[1].to_floats();
        values.back() = INFINITY;
        grads[1] = Tensor::from_floats(grads[1].shape(), values, grads[1].dtype());
    };
    models::TrainingState state;
    models::fit(model, opt, data, state, options);
    BOOST_TEST_REQUIRE(recorder.steps.size() == 8u);
    for (const models::StepLogs& s : recorder.steps) {
        BOOST_TEST(s.skipped == (s.step == 3));
        BOOST_TEST(all_equal(s.rank_digests), "step " << s.step);
        BOOST_TEST(s.batch_size == 32u); // the global batch
    }
    BOOST_TEST(opt.skipped_steps() == 1);
    BOOST_TEST(opt.scale() == 512.0f);
    BOOST_TEST(opt.iterations() == 7);
}

BOOST_AUTO_TEST_CASE(per_layer_and_fp8_scales_stay_identical_across_ranks) {
    const auto data = test_data::blobs(320, 2);
    for (const char* policy : {"mixed_float16", "mixed_float8"}) {
        BOOST_TEST_CONTEXT(policy) {
            PolicyGuard guard(policy);
            models::Sequential model;
            model.add(models::Dense(32, "relu"));
            model.add(models::Dense(32, "relu"));
            model.add(models::Dense(32, "relu"));
            model.add(models::Dense(3));
            model.build(Shape{8}, 7);
            auto inner = std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f});
            std::unique_ptr<amp::LossScaleOptimizer> opt;
            if (policy == std::string("mixed_float16"))
                opt = std::make_unique<amp::LossScaleOptimizer>(std::move(inner), amp::LossScaleOptions{},
                                                                amp::LayerScaleOptions{.growth_interval = 2});
            else {
                opt = std::make_unique<amp::LossScaleOptimizer>(std::move(inner));
                opt->scale_fp8({.recipe = amp::Fp8Recipe::delayed});
            }
            opt->set_communicator(comm());
            StepRecorder recorder;
            models::TrainingState state;
            models::fit(model, *opt, data, state, {.epochs = 2, .batch_size = 32, .callbacks = {&recorder}});
            BOOST_TEST_REQUIRE(recorder.steps.size() == 20u);
            for (const models::StepLogs& s : recorder.steps) BOOST_TEST(all_equal(s.rank_digests), "step " << s.step);
        }
    }
}

BOOST_AUTO_TEST_CASE(evaluation_shared_out_gives_the_whole_set_s_figures) {
    const auto data = test_data::blobs(301, 3); // 150 + 151 examples
    models::Sequential model;
    model.add(models::Dense(3));
    model.build(Shape{8}, 3);
    const models::Evaluation whole = models::evaluate(model, data, models::EvaluateOptions{.batch_size = 64});
    const models::Evaluation shared =
        models::evaluate(model, data, models::EvaluateOptions{.batch_size = 64, .communicator = comm().get()});
    BOOST_TEST(shared.accuracy == whole.accuracy); // counts: exact
    // Each batch's loss is a float32 mean of at most 64 positive terms (relative error ≤ 64 · 2^-24), and
    // the two runs cut the set into different batches.
    BOOST_TEST(shared.loss == whole.loss, boost::test_tools::tolerance(2 * 64 * 0x1p-24));
}

BOOST_AUTO_TEST_CASE(digests_every_n_steps_and_always_the_last) {
    const auto data = test_data::blobs(160, 4);
    for (std::int64_t every : {0, 3}) {
        models::Sequential model;
        model.add(models::Dense(3));
        model.build(Shape{8}, 9);
        amp::LossScaleOptimizer opt(std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f}));
        opt.set_communicator(comm());
        StepRecorder recorder;
        models::TrainingState state;
        models::fit(model, opt, data, state,
                    {.epochs = 1, .batch_size = 32, .callbacks = {&recorder}, .rank_digest_every = every});
        BOOST_TEST_REQUIRE(recorder.steps.size() == 5u);
        for (const models::StepLogs& s : recorder.steps) {
            const bool expected = s.step == 5 || (every > 0 && s.step % every == 0);
            BOOST_TEST(s.rank_digests.empty() == !expected, "every " << every << ", step " << s.step);
            if (expected) BOOST_TEST(all_equal(s.rank_digests));
        }
    }
}
