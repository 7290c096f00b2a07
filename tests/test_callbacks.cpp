// The Keras callbacks beyond fit's own: EarlyStopping and ReduceLROnPlateau (monitor.hpp), CSVLogger and
// LearningRateScheduler, driven directly with a FitContext and hand-made epoch logs, so that every rule is
// checked epoch by epoch; one run through fit at the end checks that they compose with it.
#define BOOST_TEST_MODULE callbacks
#include <boost/test/unit_test.hpp>

#include "scratch_dir.hpp"

#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/training/csv_logger.hpp>
#include <mixprec/models/training/fit.hpp>
#include <mixprec/models/training/learning_rate_scheduler.hpp>
#include <mixprec/models/training/monitor.hpp>
#include <mixprec/optim/sgd.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

using namespace mixprec;
using autodiff::Shape;
using autodiff::Tensor;

namespace {

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
constexpr double infinity = std::numeric_limits<double>::infinity();

/// A small built model, an SGD with a constant rate and the context a callback sees.
struct Run {
    models::Sequential model{models::Dense(3)};
    optim::SGD sgd;
    models::TrainingState state;
    models::FitContext context{model, sgd, state, 100};

    explicit Run(optim::LearningRate rate = 0.1f) : sgd(optim::SGD::Options{.learning_rate = std::move(rate)}) {
        model.build(Shape{4}, 7);
    }
};

/// Epoch `epoch`'s logs with a training loss and, if given, a validation loss and metrics.
models::EpochLogs logs_of(std::int64_t epoch, double loss, std::optional<double> val_loss = std::nullopt,
                          models::Metrics metrics = {}, models::Metrics val_metrics = {}) {
    models::EpochLogs logs;
    logs.epoch = epoch;
    logs.train_loss = loss;
    logs.metrics = std::move(metrics);
    logs.validation_loss = val_loss;
    logs.validation_metrics = std::move(val_metrics);
    return logs;
}

/// Feeds `values` as "val_loss" of epochs 0, 1, ... until the callback asks to stop; returns the epochs run.
std::size_t feed(models::Callback& callback, Run& run, const std::vector<double>& values) {
    callback.on_train_begin(run.context);
    std::size_t epochs = 0;
    while (epochs < values.size() && !run.context.stop_requested) {
        callback.on_epoch_end(run.context, logs_of(std::int64_t(epochs), 1.0, values[epochs]));
        ++epochs;
    }
    callback.on_train_end(run.context, !run.context.stop_requested);
    return epochs;
}

/// The epoch at whose end an EarlyStopping with `options` stops on `values` of "val_loss" (-1: never).
std::int64_t stop_epoch(models::EarlyStoppingOptions options, const std::vector<double>& values) {
    Run run;
    models::EarlyStopping stopper(std::move(options));
    const std::size_t epochs = feed(stopper, run, values);
    BOOST_TEST(run.context.stop_requested == stopper.stopped_epoch().has_value());
    if (stopper.stopped_epoch()) BOOST_TEST(std::size_t(*stopper.stopped_epoch() + 1) == epochs);
    return stopper.stopped_epoch().value_or(-1);
}

/// Every variable's master set to values made from `seed`, odd bit patterns included (-0, subnormals).
void set_weights(const models::Sequential& model, float seed) {
    for (autodiff::Variable v : model.variables()) {
        std::vector<float> values(v.value().size());
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = seed * float(i + 1) / 3.0f + 1e-40f * float(i);
        values[0] = -0.0f;
        v.assign(Tensor::from_floats(v.shape(), values));
    }
}

/// The masters' bytes, in order.
std::vector<std::vector<unsigned char>> weight_bytes(const models::Sequential& model) {
    std::vector<std::vector<unsigned char>> bytes;
    for (const autodiff::Variable& v : model.variables()) {
        const auto* p = static_cast<const unsigned char*>(v.value().raw());
        bytes.emplace_back(p, p + v.value().nbytes());
    }
    return bytes;
}

/// `make()` throws std::invalid_argument whose message holds `word`.
template <class F>
void check_refused(F make, const std::string& word) {
    try {
        make();
        BOOST_ERROR("not refused: " << word);
    } catch (const std::invalid_argument& e) {
        BOOST_TEST_INFO("message: " << e.what());
        BOOST_TEST(std::string(e.what()).find(word) != std::string::npos);
    }
}

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::shared_ptr<optim::ExponentialDecay> decay() {
    return std::make_shared<optim::ExponentialDecay>(optim::ExponentialDecay::Options{.initial = 0.1f});
}

} // namespace

// ---------------------------------------------------------------------------------------------------------
// EarlyStopping

// Keras's own golden case (early_stopping_test.py): patience p stops at epoch max(p, 1) + 2.
BOOST_AUTO_TEST_CASE(early_stopping_patience_as_keras) {
    const std::vector<double> losses{10.0, 9.0, 8.0, 9.0, 8.9, 8.8, 8.7, 8.6, 8.5};
    for (std::int64_t patience : {0, 1, 2, 3}) {
        BOOST_TEST_CONTEXT("patience " << patience) {
            BOOST_TEST(stop_epoch({.patience = patience}, losses) == std::max<std::int64_t>(patience, 1) + 2);
        }
    }
    BOOST_TEST(stop_epoch({.patience = 9}, losses) == -1);
}

BOOST_AUTO_TEST_CASE(early_stopping_wait_counts_epochs_without_improvement) {
    Run run;
    models::EarlyStopping stopper({.patience = 2});
    stopper.on_train_begin(run.context);
    const std::vector<double> values{1.0, 0.5, 0.75, 0.25, 0.25, 0.5};
    const std::vector<std::int64_t> waits{0, 0, 1, 0, 1, 2};
    for (std::size_t e = 0; e < values.size(); ++e) {
        stopper.on_epoch_end(run.context, logs_of(std::int64_t(e), 9.0, values[e]));
        BOOST_TEST(stopper.wait() == waits[e]);
        BOOST_TEST(run.context.stop_requested == (e == 5));
    }
    BOOST_TEST(stopper.best().value_or(-1) == 0.25);
    BOOST_TEST(stopper.best_epoch().value_or(-1) == 3);
    BOOST_TEST(stopper.stopped_epoch().value_or(-1) == 5);
}

BOOST_AUTO_TEST_CASE(early_stopping_modes) {
    // "val_accuracy" contains "acc": auto maximizes it.
    for (const std::string mode : {"auto", "max"}) {
        Run run;
        models::EarlyStopping stopper({.monitor = "val_accuracy", .patience = 1, .mode = mode});
        stopper.on_train_begin(run.context);
        const std::vector<double> accuracy{0.5, 0.625, 0.75, 0.75};
        for (std::size_t e = 0; e < accuracy.size(); ++e)
            stopper.on_epoch_end(run.context, logs_of(std::int64_t(e), 1.0, 1.0, {}, {{"accuracy", accuracy[e]}}));
        BOOST_TEST(stopper.stopped_epoch().value_or(-1) == 3); // 0.75 does not improve on 0.75
        BOOST_TEST(stopper.best_epoch().value_or(-1) == 2);
    }
    // The same figures minimized: every rise is no improvement.
    BOOST_TEST(stop_epoch({.patience = 1, .mode = "min"}, {0.5, 0.625, 0.75}) == 1);
    BOOST_TEST(stop_epoch({.patience = 1, .mode = "max"}, {0.5, 0.375, 0.75}) == 1);
    BOOST_TEST(stop_epoch({.patience = 1, .mode = "max"}, {0.5, 0.625, 0.75}) == -1);
    // Auto is min for anything without "acc".
    BOOST_TEST(stop_epoch({.patience = 0}, {0.5, 0.625}) == 1);
    BOOST_TEST(models::Monitor("m", "sparse_categorical_accuracy", "auto", 0, std::cerr).maximizes());
    BOOST_TEST(!models::Monitor("m", "val_mae", "auto", 0, std::cerr).maximizes());
    BOOST_TEST(!models::Monitor("m", "val_accuracy", "min", 0, std::cerr).maximizes());
}

// An improvement must be larger than min_delta: (min) v + d < best, (max) v - d > best; equality is none.
BOOST_AUTO_TEST_CASE(early_stopping_min_delta) {
    // Binary fractions, so that every sum is exact.
    const std::vector<double> values{1.0, 0.875, 0.5, 0.375, 0.25};
    BOOST_TEST(stop_epoch({.min_delta = 0.25, .patience = 2}, values) == 4);
    BOOST_TEST(stop_epoch({.min_delta = 0, .patience = 2}, values) == -1);
    BOOST_TEST(stop_epoch({.min_delta = 0.125, .patience = 0}, values) == 1); // 0.875 + 0.125 == 1.0

    Run run;
    models::EarlyStopping stopper({.monitor = "val_acc", .min_delta = 0.25, .patience = 2});
    stopper.on_train_begin(run.context);
    const std::vector<double> accuracy{0.0, 0.125, 0.5, 0.625, 0.75};
    for (std::size_t e = 0; e < accuracy.size() && !run.context.stop_requested; ++e)
        stopper.on_epoch_end(run.context, logs_of(std::int64_t(e), 1.0, 1.0, {}, {{"acc", accuracy[e]}}));
    BOOST_TEST(stopper.stopped_epoch().value_or(-1) == 4); // 0.75 - 0.25 == 0.5: no improvement
}

// As Keras: only an epoch that also beats the baseline resets the wait, and an improving epoch never stops.
BOOST_AUTO_TEST_CASE(early_stopping_baseline) {
    // Keras's case: nothing beats 0.5; five epochs run and the best (epoch 2) is restored.
    BOOST_TEST(stop_epoch({.patience = 5, .baseline = 0.5}, {0.9, 0.8, 0.7, 0.71, 0.72, 0.73}) == 4);
    // Epoch 1 beats the baseline and resets the wait; two epochs without improvement follow.
    BOOST_TEST(stop_epoch({.patience = 2, .baseline = 0.5}, {0.9, 0.4, 0.45, 0.46, 0.47}) == 3);
    // Without the baseline epoch 0 would have reset the wait: the stop comes one epoch later.
    BOOST_TEST(stop_epoch({.patience = 2, .baseline = 0.5}, {0.9, 0.95, 0.96}) == 1);
    BOOST_TEST(stop_epoch({.patience = 2}, {0.9, 0.95, 0.96}) == 2);
    // Improving, never below the baseline: no stop while it improves.
    BOOST_TEST(stop_epoch({.patience = 1, .baseline = 0.5}, {0.9, 0.8, 0.7, 0.6}) == -1);
    // min_delta applies to the baseline too: 0.375 beats 0.5, but not by 0.25.
    BOOST_TEST(stop_epoch({.patience = 2, .baseline = 0.5}, {0.375, 0.5, 0.5}) == 2);
    BOOST_TEST(stop_epoch({.min_delta = 0.25, .patience = 2, .baseline = 0.5}, {0.375, 0.5, 0.5}) == 1);
}

BOOST_AUTO_TEST_CASE(early_stopping_start_from_epoch) {
    const std::vector<double> values{5, 6, 7, 4, 4, 4};
    BOOST_TEST(stop_epoch({.patience = 1}, values) == 1);
    BOOST_TEST(stop_epoch({.patience = 1, .start_from_epoch = 3}, values) == 4); // epochs 0-2 unseen
    BOOST_TEST(stop_epoch({.patience = 0, .start_from_epoch = 3}, values) == 4);
    BOOST_TEST(stop_epoch({.patience = 0, .start_from_epoch = 6}, values) == -1);
}

BOOST_AUTO_TEST_CASE(early_stopping_nan_is_never_an_improvement) {
    BOOST_TEST(stop_epoch({.patience = 1}, {1.0, not_a_number}) == 1);
    BOOST_TEST(stop_epoch({.patience = 2}, {not_a_number, 1.0, 1.0, 1.0}) == 3); // 1.0 becomes the first best
    Run run;
    models::EarlyStopping stopper({.patience = 3, .restore_best_weights = true});
    set_weights(run.model, 1);
    const auto first = weight_bytes(run.model);
    stopper.on_train_begin(run.context);
    stopper.on_epoch_end(run.context, logs_of(0, 1.0, not_a_number)); // nothing better yet: epoch 0's weights are kept
    set_weights(run.model, 2);
    stopper.on_train_end(run.context, false);
    BOOST_TEST(!stopper.best().has_value());
    BOOST_TEST(stopper.best_epoch().value_or(-1) == 0);
    BOOST_TEST((weight_bytes(run.model) == first));
}

// The masters of the best epoch come back bit for bit, after the stopping epoch (at on_train_end).
BOOST_AUTO_TEST_CASE(early_stopping_restores_the_best_weights) {
    Run run;
    models::EarlyStopping stopper({.patience = 2, .restore_best_weights = true});
    const std::vector<double> values{0.9, 0.5, 0.7, 0.8};
    std::vector<std::vector<std::vector<unsigned char>>> seen;
    stopper.on_train_begin(run.context);
    for (std::size_t e = 0; e < values.size(); ++e) {
        set_weights(run.model, float(e) + 0.1f);
        seen.push_back(weight_bytes(run.model));
        stopper.on_epoch_end(run.context, logs_of(std::int64_t(e), 1.0, values[e]));
        // Change the masters in place, as an optimizer does: the kept copy must not follow.
        for (autodiff::Variable v : run.model.variables()) {
            for (float& x : v.master_data()) x += 1;
            v.mark_changed();
        }
    }
    BOOST_TEST(stopper.stopped_epoch().value_or(-1) == 3);
    BOOST_TEST(stopper.best_epoch().value_or(-1) == 1);
    BOOST_TEST((weight_bytes(run.model) != seen[1]));
    stopper.on_train_end(run.context, false);
    BOOST_TEST((weight_bytes(run.model) == seen[1]));
    // The working copy follows the restored master.
    const auto kernel = run.model.variables()[0];
    BOOST_TEST(kernel.read().to_floats() == kernel.value().to_floats());
}

// Keras 3 restores at train end whatever ended training: here the last epoch, without a stop.
BOOST_AUTO_TEST_CASE(early_stopping_restores_at_the_end_of_a_completed_run) {
    for (bool restore : {true, false}) {
        Run run;
        models::EarlyStopping stopper({.patience = 5, .restore_best_weights = restore});
        stopper.on_train_begin(run.context);
        std::vector<std::vector<std::vector<unsigned char>>> seen;
        const std::vector<double> values{0.9, 0.3, 0.7};
        for (std::size_t e = 0; e < values.size(); ++e) {
            set_weights(run.model, float(e) * 2 + 1);
            seen.push_back(weight_bytes(run.model));
            stopper.on_epoch_end(run.context, logs_of(std::int64_t(e), 1.0, values[e]));
        }
        stopper.on_train_end(run.context, true);
        BOOST_TEST(!stopper.stopped_epoch().has_value());
        BOOST_TEST((weight_bytes(run.model) == seen[restore ? 1 : 2]));
    }
}

// A second fit starts afresh: nothing of the first run's best, wait or weights is carried over.
BOOST_AUTO_TEST_CASE(early_stopping_is_reset_by_on_train_begin) {
    Run run;
    models::EarlyStopping stopper({.patience = 1, .restore_best_weights = true});
    BOOST_TEST(feed(stopper, run, {0.1, 0.2, 0.3}) == 2u);
    run.context.stop_requested = false;
    set_weights(run.model, 5);
    const auto now = weight_bytes(run.model);
    BOOST_TEST(feed(stopper, run, {0.5, 0.4}) == 2u); // 0.5 would not have improved on 0.1
    BOOST_TEST(!stopper.stopped_epoch().has_value());
    BOOST_TEST(stopper.best().value_or(-1) == 0.4);
    BOOST_TEST((weight_bytes(run.model) == now));
}

// ---------------------------------------------------------------------------------------------------------
// ReduceLROnPlateau

/// The learning rate after each epoch's on_epoch_end when `values` are fed as "val_loss".
std::vector<float> rates_after(models::ReduceLROnPlateau& plateau, Run& run, const std::vector<double>& values) {
    plateau.on_train_begin(run.context);
    std::vector<float> rates;
    for (std::size_t e = 0; e < values.size(); ++e) {
        plateau.on_epoch_end(run.context, logs_of(std::int64_t(e), 1.0, values[e]));
        rates.push_back(run.sgd.current_learning_rate());
    }
    return rates;
}

BOOST_AUTO_TEST_CASE(reduce_lr_patience_cooldown_and_min_lr) {
    Run run(1.0f);
    models::ReduceLROnPlateau plateau({.factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.2});
    // A flat loss: each reduction waits two epochs; the epoch after one is its cooldown (wait set to 0, then
    // counted again, as Keras does); the third would give 0.125 and stops at min_lr; at the floor nothing moves.
    const auto rates = rates_after(plateau, run, std::vector<double>(10, 1.0));
    const std::vector<float> expected{1, 1, 0.5f, 0.5f, 0.25f, 0.25f, 0.2f, 0.2f, 0.2f, 0.2f};
    BOOST_TEST(rates == expected, boost::test_tools::per_element());
    BOOST_TEST(plateau.reductions() == 3);
    BOOST_TEST(plateau.wait() == 3); // counting on at the floor
    BOOST_TEST(!run.sgd.learning_rate().schedule());
}

BOOST_AUTO_TEST_CASE(reduce_lr_longer_cooldown_and_improvements) {
    Run run(0.8f);
    models::ReduceLROnPlateau plateau({.factor = 0.25, .patience = 1, .min_delta = 0, .cooldown = 2});
    //                     epoch: 0    1    2    3    4    5    6    7
    const std::vector<double> v{1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5};
    const auto rates = rates_after(plateau, run, v);
    // 1: wait 1 → 0.2, cooldown 2; 2: cooldown 1 left, not counted; 3: the last cooldown epoch sets wait to
    // 0 and, none being left, counts: wait 1 → 0.05, cooldown 2; 4: cooldown; 5: an improvement;
    // 6: wait 1 → 0.0125; 7: cooldown.
    const std::vector<float> expected{0.8f, 0.2f, 0.2f, 0.05f, 0.05f, 0.05f, 0.0125f, 0.0125f};
    BOOST_TEST(rates == expected, boost::test_tools::per_element());
    BOOST_TEST(plateau.best().value_or(-1) == 0.5);
}

BOOST_AUTO_TEST_CASE(reduce_lr_default_min_delta_and_max_mode) {
    {
        Run run(1.0f);
        models::ReduceLROnPlateau plateau({.patience = 1});
        // A fall of 5e-5 is below the default min_delta of 1e-4: no improvement. The rate is multiplied in
        // double and rounded to float32.
        const auto rates = rates_after(plateau, run, {1.0, 0.99995, 0.5, 0.5});
        const std::vector<float> expected{1.0f, 0.1f, 0.1f, float(double(0.1f) * 0.1)};
        BOOST_TEST(rates == expected, boost::test_tools::per_element());
    }
    {
        Run run(1.0f);
        models::ReduceLROnPlateau plateau({.monitor = "val_accuracy", .factor = 0.5, .patience = 0});
        plateau.on_train_begin(run.context);
        const std::vector<double> accuracy{0.5, 0.75, 0.625, 0.875};
        std::vector<float> rates;
        for (std::size_t e = 0; e < accuracy.size(); ++e) {
            plateau.on_epoch_end(run.context, logs_of(std::int64_t(e), 1.0, 1.0, {}, {{"accuracy", accuracy[e]}}));
            rates.push_back(run.sgd.current_learning_rate());
        }
        const std::vector<float> expected{1.0f, 1.0f, 0.5f, 0.5f};
        BOOST_TEST(rates == expected, boost::test_tools::per_element());
    }
}

BOOST_AUTO_TEST_CASE(reduce_lr_refuses_a_schedule) {
    Run run(decay());
    models::ReduceLROnPlateau plateau;
    check_refused([&] { plateau.on_train_begin(run.context); }, "ReduceLROnPlateau cannot be combined");
    check_refused([&] { plateau.on_train_begin(run.context); }, "schedule (exponential_decay)");
    // A schedule given after the start is refused when a reduction is due, and left in place.
    Run later(1.0f);
    models::ReduceLROnPlateau patient({.patience = 1});
    patient.on_train_begin(later.context);
    patient.on_epoch_end(later.context, logs_of(0, 1.0, 1.0));
    later.sgd.set_learning_rate(decay());
    check_refused([&] { patient.on_epoch_end(later.context, logs_of(1, 1.0, 1.0)); }, "schedule");
    BOOST_TEST(later.sgd.learning_rate().schedule() != nullptr);
}

// ---------------------------------------------------------------------------------------------------------
// The missing figure: a warning on the given stream, once per run, and nothing else.

BOOST_AUTO_TEST_CASE(missing_monitor_warns_once_per_run) {
    Run run(1.0f);
    std::ostringstream warnings;
    models::EarlyStopping stopper({.patience = 0}, warnings);
    models::ReduceLROnPlateau plateau({.patience = 0}, warnings);
    for (int fit = 0; fit < 2; ++fit) {
        stopper.on_train_begin(run.context);
        plateau.on_train_begin(run.context);
        for (std::int64_t e = 0; e < 3; ++e) {
            const auto logs = logs_of(e, 2.0 - double(e), std::nullopt, {{"accuracy", 0.5}});
            stopper.on_epoch_end(run.context, logs);
            plateau.on_epoch_end(run.context, logs);
        }
        stopper.on_train_end(run.context, true);
    }
    const std::string text = warnings.str();
    BOOST_TEST_INFO(text);
    std::size_t lines = 0;
    for (const char c : text) lines += c == '\n';
    BOOST_TEST(lines == 4u); // two callbacks, two runs
    BOOST_TEST(text.find("warning: EarlyStopping monitors \"val_loss\", which the logs of epoch 0 do not have "
                         "(they have: loss accuracy)") != std::string::npos);
    BOOST_TEST(text.find("warning: ReduceLROnPlateau monitors \"val_loss\"") != std::string::npos);
    BOOST_TEST(!run.context.stop_requested);
    BOOST_TEST(!stopper.stopped_epoch().has_value());
    BOOST_TEST(run.sgd.current_learning_rate() == 1.0f);
    BOOST_TEST(plateau.reductions() == 0);
}

BOOST_AUTO_TEST_CASE(figure_names_follow_the_keras_keys) {
    const auto logs = logs_of(0, 1.0, 0.5, {{"accuracy", 0.5}, {"mae", 0.1}}, {{"accuracy", 0.4}, {"mae", 0.2}});
    const std::vector<std::string> expected{"loss", "accuracy", "mae", "val_loss", "val_accuracy", "val_mae"};
    BOOST_TEST(models::figure_names(logs) == expected, boost::test_tools::per_element());
    const std::vector<std::string> train_only{"loss"};
    BOOST_TEST(models::figure_names(logs_of(0, 1.0)) == train_only, boost::test_tools::per_element());
}

// ---------------------------------------------------------------------------------------------------------
// Bad options, each refused naming the option.

BOOST_AUTO_TEST_CASE(bad_options_are_refused_by_name) {
    using ES = models::EarlyStopping;
    using RLR = models::ReduceLROnPlateau;
    check_refused([] { ES({.monitor = ""}); }, "monitor");
    check_refused([] { ES({.min_delta = -0.1}); }, "min_delta");
    check_refused([] { ES({.min_delta = not_a_number}); }, "min_delta");
    check_refused([] { ES({.patience = -1}); }, "patience");
    check_refused([] { ES({.mode = "maximum"}); }, "mode");
    check_refused([] { ES({.baseline = infinity}); }, "baseline");
    check_refused([] { ES({.start_from_epoch = -2}); }, "start_from_epoch");
    check_refused([] { RLR({.monitor = ""}); }, "monitor");
    for (double factor : {1.0, 1.5, 0.0, -0.5, not_a_number}) check_refused([=] { RLR({.factor = factor}); }, "factor");
    check_refused([] { RLR({.patience = -1}); }, "patience");
    check_refused([] { RLR({.mode = "Min"}); }, "mode");
    check_refused([] { RLR({.min_delta = -1e-4}); }, "min_delta");
    check_refused([] { RLR({.cooldown = -1}); }, "cooldown");
    check_refused([] { RLR({.min_lr = -1}); }, "min_lr");
    check_refused([] { RLR({.min_lr = infinity}); }, "min_lr");
    check_refused([] { models::CSVLogger("x.csv", '"'); }, "separator");
    check_refused([] { models::CSVLogger("x.csv", '\n'); }, "separator");
    check_refused([] { models::LearningRateScheduler({}); }, "schedule");
    // The defaults are Keras's.
    const ES stopper;
    BOOST_TEST(stopper.options().monitor == "val_loss");
    BOOST_TEST(stopper.options().patience == 0);
    BOOST_TEST(stopper.options().min_delta == 0.0);
    const RLR plateau;
    BOOST_TEST(plateau.options().factor == 0.1);
    BOOST_TEST(plateau.options().patience == 10);
    BOOST_TEST(plateau.options().min_delta == 1e-4);
}

// ---------------------------------------------------------------------------------------------------------
// CSVLogger

BOOST_AUTO_TEST_CASE(python_float_text_is_repr) {
    const std::vector<std::pair<double, std::string>> cases{{0.1, "0.1"},
                                                            {3.0, "3.0"},
                                                            {0.0, "0.0"},
                                                            {-0.0, "-0.0"},
                                                            {1e-05, "1e-05"},
                                                            {0.0001, "0.0001"},
                                                            {1.5e-07, "1.5e-07"},
                                                            {1e16, "1e+16"},
                                                            {1e15, "1000000000000000.0"},
                                                            {123456.789, "123456.789"},
                                                            {-2.5e100, "-2.5e+100"},
                                                            {0.6931471805599453, "0.6931471805599453"},
                                                            {5e-324, "5e-324"},
                                                            {not_a_number, "nan"},
                                                            {infinity, "inf"},
                                                            {-infinity, "-inf"},
                                                            {double(0.01f), "0.009999999776482582"}};
    for (const auto& [value, text] : cases) BOOST_TEST(models::python_float_text(value) == text);
    BOOST_TEST(models::python_float_text(0.01f) == "0.01");
    BOOST_TEST(models::python_float_text(1e-5f) == "1e-05");
    BOOST_TEST(models::python_float_text(3.0f) == "3.0");
}

BOOST_AUTO_TEST_CASE(csv_logger_writes_the_file_keras_writes) {
    ScratchDir dir("callbacks");
    const auto path = dir.path / "log.csv";
    Run run(0.05f);
    {
        models::CSVLogger logger(path);
        logger.on_train_begin(run.context);
        logger.on_epoch_begin(run.context, 0);
        models::StepLogs step;
        step.learning_rate = 0.01f;
        logger.on_step_end(run.context, step);
        logger.on_epoch_end(run.context, logs_of(0, 0.5, 0.625, {{"accuracy", 0.75}}, {{"accuracy", 0.5}}));
        BOOST_TEST(read_file(path) == "epoch,loss,accuracy,val_loss,val_accuracy,learning_rate\n"
                                      "0,0.5,0.75,0.625,0.5,0.01\n"); // flushed with each row
        logger.on_epoch_begin(run.context, 1);                        // no step seen: the optimizer's rate
        logger.on_epoch_end(run.context,
                            logs_of(1, not_a_number, infinity, {{"accuracy", 1.0}}, {{"accuracy", 1e-05}}));
        logger.on_epoch_begin(run.context, 2); // columns are those of the first epoch
        logger.on_epoch_end(run.context, logs_of(2, 0.25, std::nullopt, {{"accuracy", 0.1}, {"mae", 3.0}}));
        logger.on_train_end(run.context, true);
    }
    const std::string first = "epoch,loss,accuracy,val_loss,val_accuracy,learning_rate\n"
                              "0,0.5,0.75,0.625,0.5,0.01\n"
                              "1,nan,1.0,inf,1e-05,0.05\n"
                              "2,0.25,0.1,NA,NA,0.05\n";
    BOOST_TEST(read_file(path) == first);

    // Appending (a resumed run): rows only, and the columns of the new run's first epoch.
    models::CSVLogger appender(path, ',', true);
    appender.on_train_begin(run.context);
    appender.on_epoch_end(run.context, logs_of(3, -infinity));
    appender.on_train_end(run.context, true);
    BOOST_TEST(read_file(path) == first + "3,-inf,0.05\n");

    // Without append the file starts over; a fit called again on the same logger starts over too.
    models::CSVLogger fresh(path);
    for (int fit = 0; fit < 2; ++fit) {
        fresh.on_train_begin(run.context);
        fresh.on_epoch_end(run.context, logs_of(fit, 2.0));
        fresh.on_train_end(run.context, true);
        BOOST_TEST(read_file(path) == "epoch,loss,learning_rate\n" + std::to_string(fit) + ",2.0,0.05\n");
    }
}

BOOST_AUTO_TEST_CASE(csv_logger_header_when_appending_to_nothing) {
    ScratchDir dir("callbacks");
    Run run(0.5f);
    for (const bool exists : {false, true}) {
        const auto path = dir.path / (exists ? "empty.csv" : "absent.csv");
        if (exists) std::ofstream{path};
        models::CSVLogger logger(path, ';', true);
        logger.on_train_begin(run.context);
        logger.on_epoch_end(run.context, logs_of(0, 0.125, 0.25, {{"a;b", 1.0}, {"q\"", 2.0}}));
        logger.on_train_end(run.context, true);
        BOOST_TEST(read_file(path) ==
                   "epoch;loss;\"a;b\";\"q\"\"\";val_loss;learning_rate\n0;0.125;1.0;2.0;0.25;0.5\n");
    }
}

BOOST_AUTO_TEST_CASE(csv_logger_names_a_path_it_cannot_open) {
    ScratchDir dir("callbacks");
    const auto path = dir.path / "no_such_dir" / "log.csv";
    Run run;
    models::CSVLogger logger(path);
    try {
        logger.on_train_begin(run.context);
        BOOST_ERROR("opened " << path);
    } catch (const std::runtime_error& e) {
        BOOST_TEST(std::string(e.what()).find(path.string()) != std::string::npos);
    }
}

// ---------------------------------------------------------------------------------------------------------
// LearningRateScheduler

BOOST_AUTO_TEST_CASE(learning_rate_scheduler_sets_the_rates) {
    Run run(0.1f);
    std::vector<std::pair<std::int64_t, double>> calls;
    models::LearningRateScheduler scheduler([&](std::int64_t epoch, double lr) {
        calls.emplace_back(epoch, lr);
        return epoch < 2 ? lr : lr * 0.5;
    });
    scheduler.on_train_begin(run.context);
    std::vector<float> rates;
    for (std::int64_t e = 0; e < 5; ++e) {
        scheduler.on_epoch_begin(run.context, e);
        rates.push_back(run.sgd.current_learning_rate());
    }
    const std::vector<float> expected{0.1f, 0.1f, 0.05f, 0.025f, 0.0125f};
    BOOST_TEST(rates == expected, boost::test_tools::per_element());
    BOOST_TEST(calls.size() == 5u);
    BOOST_TEST(calls[3].first == 3);
    BOOST_TEST(calls[3].second == double(0.05f)); // the float32 rate, widened
    BOOST_TEST(!run.sgd.learning_rate().schedule());

    // A rate from the epoch alone; 0 is a valid rate.
    models::LearningRateScheduler table([](std::int64_t epoch, double) { return epoch == 0 ? 0.0 : 1e-3; });
    table.on_epoch_begin(run.context, 0);
    BOOST_TEST(run.sgd.current_learning_rate() == 0.0f);
    table.on_epoch_begin(run.context, 7);
    BOOST_TEST(run.sgd.current_learning_rate() == 1e-3f);
}

BOOST_AUTO_TEST_CASE(learning_rate_scheduler_refuses_bad_rates_and_schedules) {
    Run run(0.1f);
    for (const double bad : {not_a_number, infinity, -infinity, -1e-3, 1e39}) {
        models::LearningRateScheduler scheduler([=](std::int64_t, double) { return bad; });
        std::ostringstream value;
        value << bad;
        BOOST_TEST_CONTEXT("rate " << value.str()) {
            check_refused([&] { scheduler.on_epoch_begin(run.context, 3); }, "gave " + value.str() + " for epoch 3");
            BOOST_TEST(run.sgd.current_learning_rate() == 0.1f);
        }
    }
    Run scheduled(decay());
    models::LearningRateScheduler scheduler([](std::int64_t, double lr) { return lr; });
    check_refused([&] { scheduler.on_train_begin(scheduled.context); }, "LearningRateScheduler cannot be combined");
    check_refused([&] { scheduler.on_epoch_begin(scheduled.context, 0); }, "schedule");
    BOOST_TEST(scheduled.sgd.learning_rate().schedule() != nullptr);
}

// ---------------------------------------------------------------------------------------------------------
// Through fit: the callbacks see what fit reports and their requests take effect.

BOOST_AUTO_TEST_CASE(callbacks_through_fit) {
    ScratchDir dir("callbacks");
    autodiff::Rng rng(3);
    std::vector<float> x(64 * 4);
    std::vector<std::int32_t> y(64);
    for (std::size_t i = 0; i < 64; ++i) {
        y[i] = std::int32_t(i % 3);
        for (std::size_t j = 0; j < 4; ++j) x[i * 4 + j] = (j == std::size_t(y[i]) ? 1.0f : 0.0f) + rng.uniform();
    }
    const models::TensorDataset data(Tensor::from_floats(Shape{64, 4}, x), y);

    Run run(0.1f);
    // Any change smaller than 1e9 is no improvement: the stop comes at the end of epoch 1 (patience 1), and
    // the weights go back to those after epoch 0.
    models::EarlyStopping stopper({.min_delta = 1e9, .patience = 1, .restore_best_weights = true});
    models::LearningRateScheduler halve([](std::int64_t, double lr) { return lr / 2; });
    models::CSVLogger logger(dir.path / "fit.csv");
    struct Recorder final : models::Callback {
        std::vector<std::string> digests;
        void on_epoch_end(models::FitContext& c, const models::EpochLogs&) override {
            digests.push_back(models::weights_digest(c.model.variables()));
        }
    } recorder;
    const auto history = models::fit(
        run.model, run.sgd, data, run.state,
        {.epochs = 10, .batch_size = 16, .validation = &data, .callbacks = {&halve, &recorder, &stopper, &logger}});
    BOOST_TEST(history.size() == 2u);
    BOOST_TEST(stopper.stopped_epoch().value_or(-1) == 1);
    BOOST_TEST(recorder.digests.size() == 2u);
    BOOST_TEST(recorder.digests[0] != recorder.digests[1]);
    BOOST_TEST(models::weights_digest(run.model.variables()) == recorder.digests[0]);
    BOOST_TEST(run.sgd.current_learning_rate() == 0.025f);

    const std::string csv = read_file(dir.path / "fit.csv");
    BOOST_TEST_INFO(csv);
    BOOST_TEST(csv.starts_with("epoch,loss,"));
    BOOST_TEST(csv.find("\n0,") != std::string::npos);
    BOOST_TEST(csv.find(",0.05\n1,") != std::string::npos); // epoch 0 trained at 0.05
    BOOST_TEST(csv.ends_with(",0.025\n"));
}
