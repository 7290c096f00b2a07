#pragma once
/// A checkpoint whose every value is known without training, so that a file written by one release of
/// mixprec can be committed (tests/fixtures/) and checked by every later release, on any CPU.
///
/// tests/fixtures/write_checkpoint_fixture.cpp writes it; test_checkpoint loads the committed files
/// and compares what it reads with known_state() bit for bit.

#include <mixprec/mixprec.hpp>

#include <mixprec/models/io/training_state.hpp>

#include <memory>
#include <string>
#include <vector>

namespace checkpoint_fixture {

using namespace mixprec;

inline const std::string policy = "mixed_float16";

/// Two trainable variables and one that is not, with values v_i = i/8 - 1/2 (exact in float32).
inline std::vector<autodiff::Variable> variables() {
    const auto ramp = [](autodiff::Shape shape, float offset) {
        std::vector<float> v(shape.elements());
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 8.0f - 0.5f + offset;
        return autodiff::Tensor::from_floats(shape, v);
    };
    return {autodiff::Variable(ramp(autodiff::Shape{3, 2}, 0.0f), "dense/kernel"),
            autodiff::Variable(ramp(autodiff::Shape{2}, 0.25f), "dense/bias"),
            autodiff::Variable(ramp(autodiff::Shape{2}, 1.0f), "norm/moving_mean", false)};
}

/// Loss-scale options that differ from the defaults in every field a checkpoint keeps.
inline amp::LossScaleOptions loss_scale_options() {
    amp::LossScaleOptions o = amp::loss_scale_preset("deepspeed");
    o.initial_scale = 512.0f;
    o.growth_interval = 7;
    o.hysteresis = 3;
    o.consecutive_hysteresis = true;
    o.min_scale = 0.25f;
    o.max_scale = 65536.0f;
    o.at_min_scale = amp::AtMinScale::raise;
    o.overflow_tolerance = 0.125;
    o.decrease_every = 5;
    return o;
}

inline amp::LossScaleState loss_scale_state() {
    return {.scale = 4096.0f,
            .growth_counter = 3,
            .hysteresis_left = 2,
            .iteration = 41,
            .last_overflow = 36,
            .overflows_counted = 2,
            .unclamped_scale = 8192.0f,
            .growths = 5,
            .backoffs = 2};
}

/// An amp::LossScaleOptimizer over Adam with AMSGrad (slots m, v, v_max).
inline std::unique_ptr<amp::LossScaleOptimizer> optimizer() {
    return std::make_unique<amp::LossScaleOptimizer>(
        std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 0.01f, .amsgrad = true}),
        loss_scale_options());
}

/// The value of element `j` of slot number `slot` (in Optimizer::slots() order): exact in float32.
inline float slot_value(std::size_t slot, std::size_t j) {
    return 0.125f * static_cast<float>(slot + 1) + static_cast<float>(j) / 64.0f;
}

inline models::TrainingState training_state() {
    models::TrainingState s;
    s.epoch = 2;
    s.step = 41;
    s.batch_in_epoch = 5;
    s.shuffle_rng = autodiff::Rng(101);
    s.dropout_rng = autodiff::Rng(102);
    s.init_rng = autodiff::Rng(103);
    s.epoch_loss_sum = 12.25;
    s.epoch_examples = 160;
    s.epoch_correct = 97;
    return s;
}

constexpr std::int64_t iterations = 37;
constexpr std::int64_t skipped_steps = 4;
constexpr bool last_step_skipped = true;
constexpr double last_gradient_norm = 1.5;

/// Puts the known state into `opt`, which optimizer() made, for the trainable ones of variables().
inline void set_known_state(amp::LossScaleOptimizer& opt, const std::vector<autodiff::Variable>& trainable) {
    opt.build(trainable);
    const auto slots = opt.slots();
    for (std::size_t s = 0; s < slots.size(); ++s) {
        const auto values = opt.slot_data(slots[s].name, slots[s].variable);
        for (std::size_t j = 0; j < values.size(); ++j) values[j] = slot_value(s, j);
    }
    opt.set_iterations(iterations);
    opt.loss_scale().set_state(loss_scale_state());
    opt.set_counters(skipped_steps, last_step_skipped, last_gradient_norm);
}

} // namespace checkpoint_fixture
