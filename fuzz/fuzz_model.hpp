#pragma once
// The small models the checkpoint fuzzer loads into, shared by the fuzz target and the program that
// writes its seed corpus (so that the seeds are valid checkpoints for them).

#include <mixprec/mixprec.hpp>

#include <mixprec/models/io/checkpoint.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace fuzz_model {

using mixprec::autodiff::Dtype;
using mixprec::autodiff::Shape;
using mixprec::autodiff::Tensor;
using mixprec::autodiff::Variable;

/// The three optimizers seeds are written for and loads are tried into.
enum class Kind { sgd_float32, adam_float32, loss_scaled_adam_float16 };
inline constexpr Kind kinds[] = {Kind::sgd_float32, Kind::adam_float32, Kind::loss_scaled_adam_float16};

struct Target {
    std::vector<Variable> variables; // three trainable, one not
    std::vector<Variable> trainable;
    std::unique_ptr<mixprec::optim::Optimizer> optimizer;
    mixprec::models::TrainingState state;
    std::string policy;

    explicit Target(Kind kind) {
        using namespace mixprec;
        const bool mixed = kind == Kind::loss_scaled_adam_float16;
        policy = mixed ? "mixed_float16" : "float32";
        const std::vector<std::pair<const char*, Shape>> specs = {{"dense/kernel", Shape{3, 4}},
                                                                  {"dense/bias", Shape{4}},
                                                                  {"dense_1/kernel", Shape{4, 2}},
                                                                  {"norm/count", Shape{2}}};
        float value = 0.125f;
        for (const auto& [name, shape] : specs) {
            const bool is_trainable = std::string(name) != "norm/count";
            variables.emplace_back(Tensor::full(shape, value), name, is_trainable);
            value += 0.25f;
            if (mixed) variables.back().set_working_dtype(Dtype::float16);
            if (is_trainable) trainable.push_back(variables.back());
        }
        if (kind == Kind::sgd_float32) {
            optimizer = std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f, .momentum = 0.9f});
        } else {
            auto adam = std::make_unique<optim::Adam>(optim::Adam::Options{.amsgrad = mixed});
            if (mixed)
                optimizer = std::make_unique<amp::LossScaleOptimizer>(
                    std::move(adam), amp::LossScaleOptions{.initial_scale = 256.0f, .growth_interval = 2});
            else
                optimizer = std::move(adam);
        }
    }

    /// Every bit a load may change, for "unchanged after a refused load".
    std::vector<std::uint8_t> fingerprint() const {
        std::vector<std::uint8_t> out;
        const auto add = [&out](const void* p, std::size_t n) {
            const auto* b = static_cast<const std::uint8_t*>(p);
            out.insert(out.end(), b, b + n);
        };
        for (const Variable& v : variables) add(v.value().raw(), v.value().nbytes());
        for (const auto& s : optimizer->slots()) add(s.values.data(), s.values.size_bytes());
        const std::int64_t counters[] = {optimizer->iterations(), optimizer->built(),   state.step,         state.epoch,
                                         state.batch_in_epoch,    state.epoch_examples, state.epoch_correct};
        add(counters, sizeof counters);
        add(&state.epoch_loss_sum, sizeof state.epoch_loss_sum);
        for (const auto* rng : {&state.shuffle_rng, &state.dropout_rng, &state.init_rng}) add(rng->state().data(), 32);
        for (const auto& v : optimizer->state().values) { // a LossScaleOptimizer's scale, counters, options
            add(v.name.data(), v.name.size());
            std::visit([&add](const auto& x) { add(&x, sizeof x); }, v.value);
        }
        return out;
    }
};

} // namespace fuzz_model
