// Writes the seed corpus of fuzz_load_checkpoint: valid checkpoints of the fuzz models (fuzz_model.hpp)
// at several points of training — before the first step, after a few steps, after an overflow skipped by
// the loss scaler — with and without a training state.
//
//   fuzz_checkpoint_corpus DIR

#include "fuzz_model.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace {

using namespace fuzz_model;

/// One optimizer step with gradients that depend on `step`; an inf when `overflow`.
void train_step(Target& t, int step, bool overflow) {
    std::vector<Tensor> grads;
    for (const Variable& v : t.trainable) {
        std::vector<float> values(v.shape().elements(), 0.01f * static_cast<float>(step + 1));
        if (overflow) values[0] = INFINITY;
        grads.push_back(Tensor::from_floats(v.shape(), values, v.working_dtype()));
    }
    t.optimizer->apply(grads, t.trainable);
    t.state.step += 1;
    t.state.batch_in_epoch = (t.state.batch_in_epoch + 1) % 3;
    if (t.state.batch_in_epoch == 0) ++t.state.epoch;
    t.state.epoch_loss_sum += 0.5 * step;
    t.state.epoch_examples += 4;
    t.state.dropout_rng();
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: fuzz_checkpoint_corpus DIR\n";
        return 2;
    }
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    int written = 0;
    for (Kind kind : kinds) {
        for (int steps : {0, 1, 4}) {
            for (bool with_state : {false, true}) {
                Target t(kind);
                for (int s = 0; s < steps; ++s) train_step(t, s, kind == Kind::loss_scaled_adam_float16 && s == 2);
                const auto bytes = mixprec::models::checkpoint_bytes(t.variables, t.policy, *t.optimizer,
                                                                     with_state ? &t.state : nullptr);
                std::string name = "seed-";
                name += std::to_string(static_cast<int>(kind));
                name += "-";
                name += std::to_string(steps);
                name += with_state ? "-state.ckpt" : ".ckpt";
                std::ofstream out(dir / name, std::ios::binary);
                out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
                if (!out) {
                    std::cerr << "fuzz_checkpoint_corpus: cannot write " << (dir / name) << "\n";
                    return 1;
                }
                ++written;
            }
        }
    }
    std::cout << "fuzz_checkpoint_corpus: " << written << " checkpoints in " << dir << "\n";
    return 0;
}
