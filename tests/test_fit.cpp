// fit, evaluate, predict and the callbacks: learning, resumption that gives the same bits as an
// uninterrupted run, skipped steps, logs and early stops.
#define BOOST_TEST_MODULE fit
#include <boost/test/unit_test.hpp>

#include <mixprec/amp/loss_scale_optimizer.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/training/callbacks.hpp>
#include <mixprec/models/training/fit.hpp>
#include <mixprec/models/training/model_checkpoint.hpp>
#include <mixprec/optim/adam.hpp>
#include <mixprec/optim/sgd.hpp>

#include "blobs.hpp"
#include "op_checks.hpp"
#include "policy_guard.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace mixprec;
using autodiff::Shape;
using autodiff::Tensor;
using test_data::blobs;

namespace {

models::Sequential small_model(float dropout = 0.0f) {
    models::Sequential model;
    model.add(models::Dense(16, "relu"));
    if (dropout > 0) model.add(models::Dropout(dropout));
    model.add(models::Dense(3));
    model.build(Shape{8}, 42);
    return model;
}

std::unique_ptr<amp::LossScaleOptimizer> scaled_adam(std::int64_t growth_interval = 5) {
    amp::LossScaleOptions scale;
    scale.initial_scale = 1024;
    scale.growth_interval = growth_interval;
    return std::make_unique<amp::LossScaleOptimizer>(
        std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}), scale);
}

void inject_inf_at(std::vector<std::int64_t> steps, models::FitOptions& options) {
    options.gradient_hook = [steps](std::int64_t step, std::vector<Tensor>& grads) {
        if (std::find(steps.begin(), steps.end(), step) == steps.end()) return;
        auto values = grads[0].to_floats();
        values[0] = INFINITY;
        grads[0] = Tensor::from_floats(grads[0].shape(), values, grads[0].dtype());
    };
}

using test_data::PolicyGuard;

/// Whether Sequential::compile accepts an optimizer passed as O.
template <class O>
constexpr bool compiles_with = requires(models::Sequential& m, O&& o) {
    m.compile(std::forward<O>(o));
};

std::filesystem::path temp_path(const std::string& name) {
    return std::filesystem::temp_directory_path() / ("mixprec_test_fit_" + name);
}

} // namespace

BOOST_AUTO_TEST_CASE(fit_learns_blobs_and_evaluate_agrees) {
    const auto train = blobs(600, 1), test = blobs(300, 2);
    models::Sequential model = small_model();
    optim::SGD sgd(optim::SGD::Options{.learning_rate = 0.1f, .momentum = 0.9f});
    models::TrainingState state;
    const auto before = models::evaluate(model, test);
    const auto history =
        models::fit(model, sgd, train, state, {.epochs = 3, .batch_size = 32, .seed = 3, .validation = &test});
    BOOST_TEST(history.size() == 3u);
    BOOST_TEST(state.epoch == 3);
    BOOST_TEST(state.step == 3 * 19); // ceil(600 / 32) = 19 batches per epoch, the last one of 24
    BOOST_TEST(history.back().train_loss < history.front().train_loss);
    const auto after = models::evaluate(model, test);
    BOOST_TEST(after.accuracy > 0.95);
    BOOST_TEST(after.loss < before.loss);
    BOOST_TEST(*history.back().validation_accuracy == after.accuracy);
    BOOST_TEST(models::accuracy(models::predict(model, test), std::vector<std::int32_t>(300, 0)) < 0.6);
}

BOOST_AUTO_TEST_CASE(compile_and_the_short_way) {
    const auto train = blobs(200, 1);
    models::Sequential model = small_model();
    auto adam = std::make_shared<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f});
    BOOST_CHECK_THROW(model.fit(train, {}), std::logic_error);
    BOOST_CHECK_THROW(model.optimizer(), std::logic_error);
    BOOST_CHECK_THROW(model.compile(adam, "mean_squared_logarithmic_error"), std::invalid_argument);
    BOOST_CHECK_THROW(model.compile(adam, "sparse_categorical_crossentropy", {"f1"}), std::invalid_argument);
    BOOST_CHECK_THROW(model.compile(adam, "mse", {"accuracy"}), std::invalid_argument);
    BOOST_CHECK_THROW(model.compile(nullptr), std::invalid_argument);
    BOOST_TEST(!model.compiled());
    // A reference to an optimizer would dangle once it went out of scope: compile does not take one.
    static_assert(!compiles_with<optim::Adam&>);
    static_assert(!compiles_with<optim::Adam&&>);
    static_assert(compiles_with<std::shared_ptr<optim::Adam>>);
    model.compile(adam);
    BOOST_TEST(&model.optimizer() == adam.get());
    BOOST_TEST(model.loss().name() == "sparse_categorical_crossentropy");
    BOOST_TEST(model.metrics().size() == 1u);
    model.fit(train, {.epochs = 6, .batch_size = 50});
    BOOST_TEST(model.training_state().step == 24);
    BOOST_TEST(adam->iterations() == 24);
    BOOST_TEST(model.evaluate(train).accuracy > 0.9);
}

// The model keeps its optimizer: compiling with one that then goes out of scope is fine.
BOOST_AUTO_TEST_CASE(the_model_keeps_its_optimizer_alive) {
    const auto train = blobs(100, 1);
    models::Sequential model = small_model();
    {
        auto sgd = std::make_shared<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f});
        model.compile(sgd);
    }
    model.fit(train, {.epochs = 1, .batch_size = 50});
    BOOST_TEST(model.optimizer().iterations() == 2);
}

// An optimizer that does not scale answers the loss-scaling seams as the identity: fit, its callbacks and
// checkpoints need not know which kind they hold.
BOOST_AUTO_TEST_CASE(optimizer_seams_without_loss_scaling) {
    optim::Adam adam(optim::Adam::Options{.learning_rate = 1e-2f});
    const Tensor loss = Tensor::full(Shape{1}, 0.75f);
    const Tensor same = adam.scale_loss(loss);
    BOOST_TEST(same.id() == loss.id()); // the very tensor: the tape differentiates it as it is
    BOOST_TEST(adam.current_loss_scale() == 1.0f);
    BOOST_TEST(adam.skipped_steps() == 0);
    BOOST_TEST(std::isnan(adam.last_gradient_norm()));
    const auto scaled = scaled_adam();
    const optim::Optimizer& base = *scaled;
    BOOST_TEST(base.current_loss_scale() == 1024.0f);
    BOOST_TEST(base.scale_loss(loss).flat(0) == 768.0f);
}

// FitOptions::train_step replaces the step; one that calls models::train_step gives the default run
// bit for bit, and fit's logs report what the replacement returns.
BOOST_AUTO_TEST_CASE(train_step_can_be_replaced) {
    const auto train = blobs(200, 1);
    std::string digest[2];
    for (int replaced = 0; replaced < 2; ++replaced) {
        models::Sequential model = small_model(0.25f);
        const auto opt = scaled_adam();
        models::TrainingState state;
        models::FitOptions options{.epochs = 2, .batch_size = 50, .seed = 4};
        inject_inf_at({3}, options);
        std::vector<std::int64_t> steps;
        if (replaced)
            options.train_step = [&](const models::TrainStep& s) {
                steps.push_back(s.step);
                return models::train_step(s, options.gradient_hook);
            };
        models::fit(model, *opt, train, state, options);
        BOOST_TEST(opt->skipped_steps() == 1);
        if (replaced)
            BOOST_TEST(steps == (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8}), boost::test_tools::per_element());
        digest[replaced] = models::weights_digest(model.variables());
    }
    BOOST_TEST(digest[0] == digest[1]);

    // A step that never applies: fit counts it as skipped and reports its loss.
    models::Sequential model = small_model();
    optim::SGD sgd(optim::SGD::Options{.learning_rate = 0.1f});
    models::TrainingState state;
    struct Last final : models::Callback {
        void on_step_end(models::FitContext&, const models::StepLogs& l) override { logs = l; }
        models::StepLogs logs;
    } last;
    models::fit(
        model, sgd, train, state,
        {.epochs = 1, .batch_size = 100, .callbacks = {&last}, .train_step = [](const models::TrainStep& s) {
             return models::TrainStepResult{.loss = 2.5, .y_pred = Tensor(Shape{s.x.shape()[0], 3}), .applied = false};
         }});
    BOOST_TEST(sgd.iterations() == 0);
    BOOST_TEST(last.logs.skipped);
    BOOST_TEST(last.logs.loss == 2.5);
    BOOST_TEST(state.step == 2);
}

BOOST_AUTO_TEST_CASE(bad_options_and_mismatched_data_are_named) {
    models::Sequential model = small_model();
    optim::SGD sgd;
    models::TrainingState state;
    const auto data = blobs(10, 1);
    BOOST_CHECK_THROW(models::fit(model, sgd, data, state, {.epochs = 0}), std::invalid_argument);
    BOOST_CHECK_THROW(models::fit(model, sgd, data, state, {.batch_size = 0}), std::invalid_argument);
    const models::TensorDataset wrong(Tensor(Shape{4, 5}), {0, 1, 2, 0});
    try {
        models::fit(model, sgd, wrong, state, {});
        BOOST_FAIL("a dataset of the wrong shape was accepted");
    } catch (const autodiff::shape_error& e) {
        const std::string message = e.what();
        BOOST_TEST(message.find("(5)") != std::string::npos);
        BOOST_TEST(message.find("(8)") != std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(injected_overflow_skips_the_step_and_backs_off) {
    PolicyGuard policy("mixed_float16");
    const auto train = blobs(64, 1);
    models::Sequential model = small_model();
    auto opt = scaled_adam(1000);
    models::TrainingState state;
    models::FitOptions options{.epochs = 1, .batch_size = 16};
    inject_inf_at({2, 3}, options);
    struct Recorder : models::Callback {
        void on_step_end(models::FitContext&, const models::StepLogs& logs) override { steps.push_back(logs); }
        std::vector<models::StepLogs> steps;
    } recorder;
    options.callbacks = {&recorder};
    models::fit(model, *opt, train, state, options);
    BOOST_REQUIRE(recorder.steps.size() == 4u);
    BOOST_TEST(!recorder.steps[0].skipped);
    BOOST_TEST(recorder.steps[1].skipped);
    BOOST_TEST(recorder.steps[2].skipped);
    BOOST_TEST(recorder.steps[1].loss_scale == 1024.0f);
    BOOST_TEST(recorder.steps[2].loss_scale == 512.0f);
    BOOST_TEST(opt->scale() == 256.0f);
    BOOST_TEST(opt->iterations() == 2); // skipped steps count as steps, not as optimizer iterations
    BOOST_TEST(state.step == 4);
    BOOST_TEST(std::isinf(recorder.steps[1].gradient_norm));
}

// Invariant 6: save -> load -> continue gives the bits of a run that never stopped, here with dropout,
// shuffling, float16 working copies, dynamic loss scaling and skipped steps inside the resumed window.
BOOST_AUTO_TEST_CASE(resumed_run_matches_uninterrupted_run_bit_for_bit) {
    for (const char* precision : {"float32", "mixed_float16"}) {
        BOOST_TEST_CONTEXT(precision) {
            PolicyGuard policy(precision);
            const auto train = blobs(200, 1);
            models::FitOptions options{.epochs = 3, .batch_size = 32, .seed = 9};
            inject_inf_at({5, 11, 12}, options);

            models::Sequential straight = small_model(0.25f);
            auto opt_straight = scaled_adam();
            models::TrainingState state_straight;
            models::fit(straight, *opt_straight, train, state_straight, options);

            const auto path = temp_path("resume.ckpt");
            {
                models::Sequential first = small_model(0.25f);
                auto opt_first = scaled_adam();
                models::TrainingState state_first;
                models::ModelCheckpoint checkpoint(path, 4);
                models::FitOptions stop_early = options;
                stop_early.max_steps = 10; // mid-epoch: 7 batches per epoch
                stop_early.callbacks = {&checkpoint};
                models::fit(first, *opt_first, train, state_first, stop_early);
                BOOST_TEST(state_first.step == 10);
            }
            models::Sequential resumed = small_model(0.25f);
            auto opt_resumed = scaled_adam();
            models::TrainingState state_resumed;
            models::load_checkpoint(path, resumed, *opt_resumed, &state_resumed);
            BOOST_TEST(state_resumed.step == 10);
            BOOST_TEST(state_resumed.batch_in_epoch == 3);
            models::FitOptions resume = options;
            resume.initial_epoch = state_resumed.epoch; // epochs = 3 counts from the run's start, as in Keras
            models::fit(resumed, *opt_resumed, train, state_resumed, resume);
            std::filesystem::remove(path);

            BOOST_TEST((state_resumed == state_straight));
            BOOST_TEST(models::weights_digest(resumed.variables()) == models::weights_digest(straight.variables()));
            BOOST_TEST((opt_resumed->loss_scale().state() == opt_straight->loss_scale().state()));
            BOOST_TEST(opt_resumed->skipped_steps() == 3);
            BOOST_TEST(opt_resumed->iterations() == opt_straight->iterations());
        }
    }
}

BOOST_AUTO_TEST_CASE(backup_and_restore_resumes_automatically_and_cleans_up) {
    const auto train = blobs(100, 1);
    const auto path = temp_path("backup.ckpt");
    std::filesystem::remove(path);
    models::FitOptions options{.epochs = 2, .batch_size = 25, .seed = 4};

    models::Sequential straight = small_model();
    auto opt_straight = scaled_adam();
    models::TrainingState state_straight;
    models::fit(straight, *opt_straight, train, state_straight, options);

    models::Sequential model = small_model();
    auto opt = scaled_adam();
    models::TrainingState state;
    models::BackupAndRestore backup(path, 2);
    models::FitOptions interrupted = options;
    interrupted.max_steps = 3;
    interrupted.callbacks = {&backup};
    models::fit(model, *opt, train, state, interrupted);
    BOOST_TEST(!backup.restored());
    BOOST_TEST(std::filesystem::exists(path));

    models::Sequential again = small_model(); // a new process would start from scratch like this
    auto opt_again = scaled_adam();
    models::TrainingState state_again;
    options.callbacks = {&backup};
    models::fit(again, *opt_again, train, state_again, options);
    BOOST_TEST(backup.restored());
    BOOST_TEST(!std::filesystem::exists(path)); // deleted once training completed
    BOOST_TEST(models::weights_digest(again.variables()) == models::weights_digest(straight.variables()));
}

BOOST_AUTO_TEST_CASE(json_lines_log_has_a_line_per_step_and_epoch_and_an_end) {
    const auto train = blobs(64, 1), test = blobs(32, 2);
    const auto path = temp_path("log.jsonl");
    models::Sequential model = small_model();
    auto opt = scaled_adam();
    models::TrainingState state;
    double logger_samples_per_second = 0;
    {
        models::JsonLinesLogger logger(path);
        models::FitOptions options{.epochs = 2, .batch_size = 16, .validation = &test, .callbacks = {&logger}};
        inject_inf_at({3}, options);
        models::fit(model, *opt, train, state, options);
        logger_samples_per_second = logger.summary().samples_per_second;
        BOOST_TEST(logger.summary().steps == 8);
        BOOST_TEST(logger.summary().skipped_steps == 1);
        BOOST_TEST(logger.summary().peak_rss_mib > 1.0);
        BOOST_TEST(logger.summary().weights_digest == models::weights_digest(model.variables()));
    }
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::filesystem::remove(path);
    BOOST_REQUIRE(lines.size() == 8u + 2u + 1u);
    BOOST_TEST(lines[0].rfind("{\"step\":1,\"epoch\":1,\"loss\":", 0) == 0);
    BOOST_TEST(lines[2].find("\"skipped\":true,\"grad_norm\":null") != std::string::npos);
    // each step's training time, and together (with the epochs' logging and evaluation left out) the
    // summary's clock: its samples per second
    double step_seconds = 0;
    for (std::size_t i : {0, 1, 2, 3, 5, 6, 7, 8}) {
        const std::size_t at = lines[i].find(",\"seconds\":");
        BOOST_TEST_REQUIRE(at != std::string::npos, lines[i]);
        const double seconds = std::strtod(lines[i].c_str() + at + 11, nullptr);
        BOOST_TEST(seconds > 0.0);
        step_seconds += seconds;
    }
    BOOST_TEST(logger_samples_per_second == 8 * 16 / step_seconds, boost::test_tools::tolerance(1e-6));
    BOOST_TEST(lines[4].rfind("{\"event\":\"epoch\",\"epoch\":1,\"train_loss\":", 0) == 0);
    BOOST_TEST(lines[4].find("\"test_accuracy\":") != std::string::npos);
    BOOST_TEST(lines[10].rfind("{\"event\":\"end\",\"steps\":8,\"skipped_steps\":1,", 0) == 0);
    BOOST_TEST(lines[10].find("\"weights_digest\":\"" + models::weights_digest(model.variables()) + "\"") !=
               std::string::npos);
}

BOOST_AUTO_TEST_CASE(terminate_on_nan_stops_after_a_nan_loss) {
    std::vector<float> x(8 * 8, 1.0f);
    x[3] = NAN; // the first example's loss is NaN whatever the weights
    const models::TensorDataset data(Tensor::from_floats(Shape{8, 8}, x), std::vector<std::int32_t>(8, 1));
    models::Sequential model = small_model();
    optim::SGD sgd;
    models::TrainingState state;
    std::ostringstream messages;
    models::TerminateOnNaN terminate(messages);
    models::fit(model, sgd, data, state, {.epochs = 5, .batch_size = 4, .shuffle = false, .callbacks = {&terminate}});
    BOOST_TEST(terminate.terminated());
    BOOST_TEST(state.step == 1);
    BOOST_TEST(messages.str().find("step 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(progress_bar_prints_keras_style_lines) {
    const auto train = blobs(64, 1), test = blobs(32, 2);
    models::Sequential model = small_model();
    auto opt = scaled_adam();
    models::TrainingState state;
    std::ostringstream out;
    models::ProgressBar progress(out, false);
    models::fit(model, *opt, train, state,
                {.epochs = 2, .batch_size = 16, .validation = &test, .callbacks = {&progress}});
    const std::string text = out.str();
    BOOST_TEST(text.find("Epoch 1/2\n") == 0u);
    BOOST_TEST(text.find("Epoch 2/2\n") != std::string::npos);
    BOOST_TEST(text.find("4/4 ━━━━━━━━━━━━━━━━━━━━") != std::string::npos);
    BOOST_TEST(text.find("loss_scale: 1024") != std::string::npos);
    BOOST_TEST(text.find("test_accuracy: ") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(loss_scale_monitor_reports_moves) {
    const auto train = blobs(64, 1);
    models::Sequential model = small_model();
    auto opt = scaled_adam(2);
    models::TrainingState state;
    std::ostringstream out;
    models::LossScaleMonitor monitor(out, 4, 0.2);
    models::FitOptions options{.epochs = 1, .batch_size = 16, .callbacks = {&monitor}};
    inject_inf_at({1}, options);
    models::fit(model, *opt, train, state, options);
    // step 1 overflows (1024 -> 512), steps 2-3 grow it back (512 -> 1024), step 4 is the first of a new count
    BOOST_TEST(monitor.changes() == 2);
    BOOST_TEST(out.str().find("step 1: loss scale 1024 -> 512 (overflow: step skipped)") != std::string::npos);
    BOOST_TEST(out.str().find("step 3: loss scale 512 -> 1024 (grown)") != std::string::npos);
    BOOST_TEST(out.str().find("warning: 1 of the last 4 steps were skipped") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(weights_digest_sees_every_bit) {
    models::Sequential model = small_model();
    const std::string before = models::weights_digest(model.variables());
    BOOST_TEST(before.size() == 16u);
    auto v = model.variables().back();
    auto values = v.value().to_floats();
    values[0] = std::nextafter(values[0], 1.0f);
    v.assign(Tensor::from_floats(v.shape(), values));
    BOOST_TEST(models::weights_digest(model.variables()) != before);
}

// A second fit({.epochs = 1}) trains one more epoch, as Keras's does; initial_epoch makes `epochs` count
// from the run's start, and must be where the state is.
BOOST_AUTO_TEST_CASE(epochs_count_from_where_the_state_is) {
    const auto train = blobs(100, 1);
    models::Sequential model = small_model();
    optim::SGD sgd(optim::SGD::Options{.learning_rate = 0.1f});
    models::TrainingState state;
    BOOST_TEST(models::fit(model, sgd, train, state, {.epochs = 1, .batch_size = 50}).size() == 1u);
    BOOST_TEST(models::fit(model, sgd, train, state, {.epochs = 1, .batch_size = 50}).size() == 1u);
    BOOST_TEST(state.epoch == 2);
    BOOST_TEST(models::fit(model, sgd, train, state, {.epochs = 3, .initial_epoch = 2, .batch_size = 50}).size() == 1u);
    BOOST_TEST(state.epoch == 3);
    BOOST_TEST((op_checks::throws_with<std::invalid_argument>(
        [&] { models::fit(model, sgd, train, state, {.epochs = 5, .initial_epoch = 0, .batch_size = 50}); },
        {"initial_epoch is 0", "epoch 3"})));
    // An epoch left unfinished counts as the first of `epochs`.
    models::fit(model, sgd, train, state, {.epochs = 1, .batch_size = 50, .max_steps = state.step + 1});
    BOOST_TEST(state.batch_in_epoch == 1);
    models::fit(model, sgd, train, state, {.epochs = 1, .batch_size = 50});
    BOOST_TEST(state.epoch == 4);
    BOOST_TEST(state.batch_in_epoch == 0);
}

// accumulate_steps = 2 with batches of 50 is the step of one batch of 100 (the mean of the two halves'
// gradients), up to float32 rounding: the same examples, the same number of updates.
BOOST_AUTO_TEST_CASE(accumulated_steps_average_their_batches) {
    const auto train = blobs(200, 1);
    std::vector<float> weights[2];
    std::int64_t steps[2];
    for (int accumulate = 0; accumulate < 2; ++accumulate) {
        models::Sequential model = small_model();
        optim::SGD sgd(optim::SGD::Options{.learning_rate = 0.1f});
        models::TrainingState state;
        models::fit(model, sgd, train, state,
                    {.epochs = 2,
                     .batch_size = accumulate ? 50u : 100u,
                     .shuffle = false,
                     .accumulate_steps = accumulate ? 2 : 1});
        steps[accumulate] = state.step;
        BOOST_TEST(sgd.iterations() == 4);
        for (const auto& v : model.variables())
            for (float w : v.value().to_floats()) weights[accumulate].push_back(w);
    }
    BOOST_TEST(steps[0] == steps[1]);
    // Four SGD steps from the same weights; the gradients differ by float32 rounding of the sums (a few
    // units of 2^-24 relative), so the weights agree far below the 1e-5 checked here.
    for (std::size_t i = 0; i < weights[0].size(); ++i)
        BOOST_TEST(weights[1][i] == weights[0][i], boost::test_tools::tolerance(1e-5f));
    // 3 batches of 80 per epoch with accumulate_steps = 2: steps of 2 and 1 batches.
    models::Sequential model = small_model();
    optim::SGD sgd;
    models::TrainingState state;
    struct Sizes final : models::Callback {
        void on_step_end(models::FitContext&, const models::StepLogs& l) override { sizes.push_back(l.batch_size); }
        std::vector<std::size_t> sizes;
    };
    auto sizes = std::make_shared<Sizes>(); // held by the options
    models::fit(model, sgd, blobs(200, 2), state,
                {.epochs = 1, .batch_size = 80, .accumulate_steps = 2, .callbacks = {sizes}});
    BOOST_TEST(sizes->sizes == (std::vector<std::size_t>{160, 40}), boost::test_tools::per_element());
    BOOST_TEST(state.step == 2);
    BOOST_CHECK_THROW(models::fit(model, sgd, blobs(10, 2), state, {.accumulate_steps = 0}), std::invalid_argument);
    BOOST_CHECK_THROW(models::fit(model, sgd, blobs(10, 2), state,
                                  {.accumulate_steps = 2,
                                   .train_step = [](const models::TrainStep&) { return models::TrainStepResult{}; }}),
                      std::invalid_argument);
}

// Resuming from a checkpoint taken between accumulated steps gives the bits of the uninterrupted run.
BOOST_AUTO_TEST_CASE(accumulated_run_resumes_bit_for_bit) {
    PolicyGuard policy("mixed_float16");
    const auto train = blobs(200, 1);
    models::FitOptions options{.epochs = 2, .batch_size = 20, .seed = 5, .accumulate_steps = 3};
    inject_inf_at({2}, options);
    models::Sequential straight = small_model(0.25f);
    auto opt_straight = scaled_adam();
    models::TrainingState state_straight;
    models::fit(straight, *opt_straight, train, state_straight, options);
    BOOST_TEST(state_straight.step == 8); // 10 batches per epoch: steps of 3, 3, 3 and 1

    const auto path = temp_path("accumulate.ckpt");
    {
        models::Sequential first = small_model(0.25f);
        auto opt_first = scaled_adam();
        models::TrainingState state_first;
        models::ModelCheckpoint checkpoint(path, 2);
        models::FitOptions stop = options;
        stop.max_steps = 6;
        stop.callbacks = {&checkpoint};
        models::fit(first, *opt_first, train, state_first, stop);
    }
    models::Sequential resumed = small_model(0.25f);
    auto opt_resumed = scaled_adam();
    models::TrainingState state_resumed;
    models::load_checkpoint(path, resumed, *opt_resumed, &state_resumed);
    std::filesystem::remove(path);
    BOOST_TEST(state_resumed.step == 6);
    BOOST_TEST(state_resumed.batch_in_epoch == 6);
    models::FitOptions resume = options;
    resume.initial_epoch = state_resumed.epoch;
    models::fit(resumed, *opt_resumed, train, state_resumed, resume);
    BOOST_TEST(models::weights_digest(resumed.variables()) == models::weights_digest(straight.variables()));
    BOOST_TEST(opt_resumed->skipped_steps() == 1);
}

// Under a mixed policy the model still answers in float32 (its last layer's output widened exactly).
BOOST_AUTO_TEST_CASE(outputs_are_float32_under_mixed_policies) {
    PolicyGuard policy("mixed_float16");
    models::Sequential model = small_model();
    const Tensor out = model(Tensor::full(Shape{1, 8}, 0.5f));
    BOOST_TEST(out.dtype() == autodiff::Dtype::float32);
    BOOST_TEST(model.layers().back()->policy().compute_dtype() == autodiff::Dtype::float16);
    // The values are the float16 results: widening is exact.
    for (float v : out.to_floats()) BOOST_TEST(Tensor::full(Shape{1}, v).to(autodiff::Dtype::float16).flat(0) == v);
    models::Sequential empty;
    BOOST_TEST((op_checks::throws_with<std::logic_error>([&] { empty.build(Shape{8}); }, {"no layers"})));
}

BOOST_AUTO_TEST_CASE(validation_split_holds_out_the_last_examples) {
    const models::TensorDataset data = blobs(100, 6);
    models::Sequential model = small_model();
    auto opt = std::make_shared<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f});
    model.compile(opt);
    const auto history = model.fit(data, {.epochs = 2, .batch_size = 10, .validation_split = 0.25});
    BOOST_REQUIRE(history.size() == 2u);
    BOOST_TEST(history[1].last_step == 16); // ⌈100 · 0.75⌉ = 75 examples train: 8 batches an epoch
    BOOST_REQUIRE(history[1].validation_loss.has_value());
    const models::DatasetSlice last(data, 75, 25);
    BOOST_TEST(*history[1].validation_loss == model.evaluate(last, 10).loss);
    BOOST_TEST(*history[1].validation_accuracy == model.evaluate(last, 10).accuracy);

    BOOST_TEST((op_checks::throws_with<std::invalid_argument>(
        [&] { model.fit(data, {.validation = &data, .validation_split = 0.1}); }, {"not both"})));
    BOOST_TEST((op_checks::throws_with<std::invalid_argument>([&] { model.fit(data, {.validation_split = 1.0}); },
                                                              {"validation_split must be in [0, 1)"})));
    BOOST_TEST((op_checks::throws_with<std::invalid_argument>(
        [&] { model.fit(blobs(3, 1), {.validation_split = 0.1}); }, {"leaves 3 for training and 0 for validation"})));
    BOOST_TEST((op_checks::throws_with<std::invalid_argument>([&] { models::DatasetSlice(data, 90, 11); },
                                                              {"[90, 90 + 11)", "100 examples"})));
}
