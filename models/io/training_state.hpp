#pragma once
/// TrainingState: where a training run is, beyond the model and the optimizer: enough, with them, to
/// continue a run as if it had never stopped. fit() keeps one; checkpoints save and restore it.

#include <mixprec/autodiff/tensor/rng.hpp>

#include <cstdint>

namespace mixprec::models {

struct TrainingState {
    std::int64_t epoch = 0;          ///< the epoch in progress (0-based)
    std::int64_t step = 0;           ///< batches done since the start of training (skipped ones included)
    std::int64_t batch_in_epoch = 0; ///< batches of the current epoch done
    /// The shuffling generator as it was at the start of the current epoch: the epoch's order is drawn
    /// from it again on resume, and leaves it where the uninterrupted run left it.
    autodiff::Rng shuffle_rng{0};
    autodiff::Rng dropout_rng{0}; ///< as it is now
    autodiff::Rng init_rng{0};    ///< the initializers' generator, after building
    // Running sums of the current epoch, so that its reported figures match an uninterrupted run.
    double epoch_loss_sum = 0; ///< Σ batch loss · batch size
    std::int64_t epoch_examples = 0;
    std::int64_t epoch_correct = 0;
    friend bool operator==(const TrainingState&, const TrainingState&) = default;
};

} // namespace mixprec::models
