// A small training run that checkpoints after every step, for tests/checkpoint_kill.sh, which SIGKILLs it
// at random moments and checks that it always resumes to the same final weights.
//
//   checkpoint_kill_worker --dir D --steps N [--slow-us U]   train to step N, resuming from D/run.ckpt if it
//                                                           exists; print "digest <crc> step <n> ..." at the end
//   checkpoint_kill_worker --dir D --check                  load D/run.ckpt (and D/run.ckpt.1) into a fresh
//                                                           model; print "step <n>" ("step -1" if none); exit 1
//                                                           if a file that exists does not load
//
// The model: a 2-layer MLP (dense, relu, dropout, dense) on fixed random data, mixed_float16 working
// copies, Adam inside a LossScaleOptimizer, an inf injected into a gradient every 37 steps (skipped
// steps), data shuffled per epoch from the TrainingState's generator. --slow-us sleeps between steps
// so that a run lasts long enough for kills to spread over training and saving.

#include <mixprec/mixprec.hpp>

#include <mixprec/models/io/checkpoint.hpp>
#include <mixprec/models/io/crc32c.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Rng;
using autodiff::Shape;
using autodiff::Tensor;
using autodiff::Variable;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t examples = 64, batch = 16, inputs = 16, hidden = 32, classes = 4;
constexpr std::int64_t batches_per_epoch = examples / batch;

struct Trainer {
    std::vector<Variable> vars;
    amp::LossScaleOptimizer opt{std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 0.01f}),
                                amp::LossScaleOptions{.initial_scale = 1024.0f, .growth_interval = 4}};
    models::TrainingState state;
    Tensor x;
    std::vector<std::int32_t> y;

    Trainer() {
        state.shuffle_rng = Rng(21);
        state.dropout_rng = Rng(22);
        Rng init(23);
        const std::vector<std::pair<const char*, Shape>> specs = {{"dense/kernel", Shape{inputs, hidden}},
                                                                  {"dense/bias", Shape{hidden}},
                                                                  {"dense_1/kernel", Shape{hidden, classes}},
                                                                  {"dense_1/bias", Shape{classes}}};
        for (const auto& [name, shape] : specs) {
            std::vector<float> v(shape.elements());
            for (float& e : v) e = (init.uniform() - 0.5f) * 0.5f;
            vars.emplace_back(Tensor::from_floats(shape, v), name);
            vars.back().set_working_dtype(Dtype::float16);
        }
        state.init_rng = init;
        std::mt19937 gen(24);
        std::normal_distribution<float> d(0.0f, 1.0f);
        std::vector<float> xs(examples * inputs);
        for (float& e : xs) e = d(gen);
        x = Tensor::from_floats(Shape{examples, inputs}, xs);
        for (std::size_t i = 0; i < examples; ++i) y.push_back(static_cast<std::int32_t>(gen() % classes));
    }

    void step() {
        Rng order_rng = state.shuffle_rng; // the epoch's order comes from the generator at the epoch's start
        const std::vector<std::size_t> order = models::shuffled_order(examples, order_rng);
        std::vector<float> xb;
        std::vector<std::int32_t> yb;
        for (std::size_t k = 0; k < batch; ++k) {
            const std::size_t row = order[static_cast<std::size_t>(state.batch_in_epoch) * batch + k];
            for (std::size_t j = 0; j < inputs; ++j) xb.push_back(x.at({row, j}));
            yb.push_back(y[row]);
        }
        autodiff::GradientTape tape;
        const Tensor xt = Tensor::from_floats(Shape{batch, inputs}, xb, Dtype::float16);
        Tensor h = autodiff::relu(autodiff::dense(xt, vars[0].read(), vars[1].read()));
        h = autodiff::dropout(h, 0.2f, state.dropout_rng, true);
        const Tensor logits = autodiff::dense(h, vars[2].read(), vars[3].read());
        const Tensor loss = autodiff::sparse_categorical_crossentropy(yb, logits);
        std::vector<Tensor> grads = tape.gradient(opt.scale_loss(loss), vars);
        if (state.step % 37 == 5) grads[0].set({0, 0}, INFINITY);
        opt.apply(grads, vars);
        state.epoch_loss_sum += static_cast<double>(loss.flat(0)) * batch;
        state.epoch_examples += static_cast<std::int64_t>(batch);
        ++state.step;
        if (++state.batch_in_epoch == batches_per_epoch) {
            state.shuffle_rng = order_rng;
            ++state.epoch;
            state.batch_in_epoch = 0;
            state.epoch_loss_sum = 0;
            state.epoch_examples = 0;
        }
    }

    void load(const fs::path& file) { models::load_checkpoint(file, vars, "mixed_float16", opt, &state); }

    /// CRC-32C over every master, slot, the loss-scale state and the training position.
    std::uint32_t digest() const {
        std::uint32_t crc = 0;
        const auto add = [&crc](const void* p, std::size_t n) {
            crc = models::crc32c(std::span(static_cast<const std::uint8_t*>(p), n), crc);
        };
        for (const Variable& v : vars) add(v.value().raw(), v.value().nbytes());
        for (const auto& s : opt.slots()) add(s.values.data(), s.values.size_bytes());
        const amp::LossScaleState& ls = opt.loss_scale().state();
        add(&ls.scale, sizeof ls.scale);
        add(&ls.growth_counter, sizeof ls.growth_counter);
        const std::int64_t counters[] = {opt.iterations(), opt.skipped_steps(), state.step, state.epoch};
        add(counters, sizeof counters);
        add(&state.epoch_loss_sum, sizeof state.epoch_loss_sum);
        add(state.dropout_rng.state().data(), 32);
        add(state.shuffle_rng.state().data(), 32);
        return crc;
    }
};

int usage() {
    std::cerr << "usage: checkpoint_kill_worker --dir D (--steps N [--slow-us U] | --check)\n";
    return 2;
}

int check(const fs::path& dir) {
    std::int64_t step = -1;
    for (const char* name : {"run.ckpt.1", "run.ckpt"}) {
        const fs::path file = dir / name;
        if (!fs::exists(file)) continue;
        Trainer t;
        t.load(file); // throws on a broken file
        step = t.state.step;
    }
    std::cout << "step " << step << "\n";
    return 0;
}

int train(const fs::path& dir, std::int64_t steps, long slow_us) {
    const fs::path file = dir / "run.ckpt";
    Trainer t;
    if (fs::exists(file)) t.load(file);
    while (t.state.step < steps) {
        t.step();
        models::save_checkpoint(file, t.vars, "mixed_float16", t.opt, &t.state, {.keep_last = 2});
        if (slow_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(slow_us));
    }
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", t.digest());
    std::cout << "digest " << hex << " step " << t.state.step << " skipped " << t.opt.skipped_steps() << " scale "
              << t.opt.scale() << "\n";
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    fs::path dir;
    std::int64_t steps = -1;
    long slow_us = 0;
    bool check_only = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--dir" && has_value)
            dir = argv[++i];
        else if (arg == "--steps" && has_value)
            steps = std::stoll(argv[++i]);
        else if (arg == "--slow-us" && has_value)
            slow_us = std::stol(argv[++i]);
        else if (arg == "--check")
            check_only = true;
        else
            return usage();
    }
    if (dir.empty() || (!check_only && steps < 0)) return usage();
    try {
        return check_only ? check(dir) : train(dir, steps, slow_us);
    } catch (const std::exception& e) {
        std::cerr << "checkpoint_kill_worker: " << e.what() << "\n";
        return 1;
    }
}
