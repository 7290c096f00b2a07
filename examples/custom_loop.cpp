// A layer of your own and a training loop written out by hand, as in a Keras custom training loop:
// mixed_float16 with a LossScaleOptimizer, GradientTape, a checkpoint at the end of every epoch, and
// --resume to continue from one exactly where it was.
//
// The layer is RMSNorm, y = x / √(mean(x²) + ε) ⊙ g over the last axis, with a learnable gain g: its
// variable comes from make_variable (a float32 master read in the compute dtype) and its forward pass is
// made of autodiff ops, so the tape differentiates it with nothing more to write. The data are 2,048
// synthetic 4×4 "images" in 4 classes (seeded). Each epoch visits them in a shuffled order, and Dropout
// draws its masks, from generators kept in a TrainingState with the epoch and step; the checkpoint saves it
// with the weights and the optimizer, so the two runs
//
//   custom_loop --epochs 4
//   custom_loop --epochs 2 && custom_loop --epochs 4 --resume custom_loop.ckpt
//
// end with the same weights: the digest printed last is the same.
//
//   custom_loop [--epochs N] [--checkpoint PATH] [--resume PATH]
//
// --epochs counts from the start of the run, also when resuming (as Keras's fit with initial_epoch).
// Exit codes: 0 after training, 2 for bad flags, 1 when a checkpoint cannot be read or written.
#include <mixprec/mixprec.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Shape;
using autodiff::Tensor;
using autodiff::Variable;

namespace {

/// Root-mean-square normalization with a learnable gain (as T5's and LLaMA's), over the last axis of
/// examples (..., d): y = x / √(mean(x²) + ε) ⊙ g, g of shape (d) starting at ones. The statistics are
/// taken in float32 whatever the compute dtype, as LayerNorm does. Variable "<name>/gain".
class RMSNorm final : public models::Layer {
  public:
    explicit RMSNorm(float epsilon = 1e-6f) : epsilon_(epsilon) {}

    std::string kind() const override { return "RMSNorm"; }
    std::string config() const override {
        char text[32];
        std::snprintf(text, sizeof text, "epsilon=%g", double(epsilon_));
        return text;
    }
    std::vector<Variable> variables() const override {
        if (!gain_) return {};
        return {*gain_};
    }

  protected:
    Shape do_build(const Shape& input_shape, models::Rng& /*init_rng*/) override {
        if (input_shape.rank() == 0) models::throw_input_shape_error(*this, input_shape, "(..., d)");
        gain_ = make_variable(models::ones(Shape{input_shape.dim(-1)}), "gain");
        return input_shape;
    }

    Tensor forward(const Tensor& x, const models::CallContext& /*context*/) override { // x: (batch, ..., d)
        using namespace autodiff;
        const Tensor x32 = cast(x, Dtype::float32);
        const Tensor mean_square = mean(square(x32), {-1}, /*keepdims=*/true);  // (batch, ..., 1)
        const Tensor rms = sqrt(mean_square + Tensor::full(Shape{}, epsilon_)); // (batch, ..., 1)
        return cast(x32 / rms, x.dtype()) * gain_->read(); // back in the compute dtype, times g (d)
    }

  private:
    float epsilon_;
    std::optional<Variable> gain_;
};

constexpr std::size_t num_classes = 4;

/// 2,048 examples of 4×4 values ~ N(0, 1) whose class is given by the signs of two fixed projections
/// (so each class is one quadrant of a plane), from a fixed seed.
models::TensorDataset make_dataset() {
    constexpr std::size_t n = 2048, d = 16;
    std::mt19937 gen(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> a(d), b(d), x(n * d);
    for (std::size_t j = 0; j < d; ++j) a[j] = normal(gen), b[j] = normal(gen);
    std::vector<std::int32_t> labels(n);
    for (std::size_t i = 0; i < n; ++i) {
        float pa = 0, pb = 0;
        for (std::size_t j = 0; j < d; ++j) {
            x[i * d + j] = normal(gen);
            pa += a[j] * x[i * d + j];
            pb += b[j] * x[i * d + j];
        }
        labels[i] = 2 * (pa > 0) + (pb > 0);
    }
    return models::TensorDataset(Tensor::from_floats(Shape{n, 4, 4}, x), std::move(labels));
}

struct Flags {
    std::int64_t epochs = 4;
    std::string checkpoint = "custom_loop.ckpt", resume;
};

int run(const Flags& flags) {
    const models::TensorDataset data = make_dataset();
    constexpr std::size_t batch_size = 64;
    constexpr std::uint64_t seed = 1;

    amp::set_global_policy("mixed_float16"); // float16 compute, float32 master weights
    models::Sequential model{models::Flatten(), models::Dense(32, "relu"), RMSNorm(), models::Dropout(0.1f),
                             models::Dense(num_classes)};
    model.build(data.example_shape(), seed);
    auto opt = std::make_shared<amp::LossScaleOptimizer>(
        std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 3e-3f}));
    const std::vector<Variable> vars = model.trainable_variables();

    // Where the run is: epoch and step, and the generators of the shuffled order and the dropout masks.
    models::TrainingState state;
    if (flags.resume.empty()) {
        state.shuffle_rng.reseed(seed);
        state.dropout_rng.reseed(seed + 1);
        std::cout << model.summary() << '\n';
    } else {
        models::load_checkpoint(flags.resume, model, *opt, &state); // weights, optimizer and state
        std::printf("resumed from %s after epoch %lld (step %lld)\n", flags.resume.c_str(),
                    static_cast<long long>(state.epoch), static_cast<long long>(state.step));
    }

    Tensor x;                         // (batch, 4, 4)
    std::vector<std::int32_t> labels; // (batch)
    while (state.epoch < flags.epochs) {
        // A new order every epoch, drawn from the state's generator: a resumed run draws the one the
        // uninterrupted run would have. (Checkpoints fall between epochs, so the generator may move now.)
        const std::vector<std::size_t> order = models::shuffled_order(data.size(), state.shuffle_rng);
        double loss_sum = 0, correct = 0;
        std::int64_t skipped = 0;
        for (std::size_t begin = 0; begin < order.size(); begin += batch_size) {
            const std::size_t count = std::min(batch_size, order.size() - begin);
            data.batch(std::span(order).subspan(begin, count), x, labels);

            autodiff::GradientTape tape;
            const Tensor logits = model(x, {.training = true, .dropout_rng = &state.dropout_rng}); // float32
            const Tensor loss = autodiff::sparse_categorical_crossentropy(labels, logits);         // float32 scalar
            // Gradients of loss · S (float16 gradients would underflow without S); apply divides by S again
            // and skips the step if any gradient overflowed, lowering S.
            const std::vector<Tensor> grads = tape.gradient(opt->scale_loss(loss), vars);
            if (!opt->apply(grads, vars)) ++skipped;

            ++state.step;
            loss_sum += double(loss.flat(0)) * double(count);
            correct += models::accuracy(logits, labels) * double(count);
        }
        ++state.epoch;
        models::save_checkpoint(flags.checkpoint, model, *opt, &state);
        std::printf("epoch %lld/%lld: loss %.4f, accuracy %.1f%%, loss scale %g, %lld skipped steps\n",
                    static_cast<long long>(state.epoch), static_cast<long long>(flags.epochs),
                    loss_sum / double(data.size()), 100 * correct / double(data.size()), double(opt->scale()),
                    static_cast<long long>(skipped));
    }
    std::printf("checkpoint %s, step %lld; weights digest %s\n", flags.checkpoint.c_str(),
                static_cast<long long>(state.step), models::weights_digest(model.variables()).c_str());
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"A custom layer and a hand-written mixed-precision training loop, with checkpoints"};
    Flags flags;
    app.add_option("--epochs", flags.epochs, "epochs, counted from the start of the run")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{10000}))
        ->capture_default_str();
    app.add_option("--checkpoint", flags.checkpoint, "where to save a checkpoint after every epoch")
        ->capture_default_str();
    app.add_option("--resume", flags.resume, "continue from this checkpoint")->check(CLI::ExistingFile);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2; // the message, or the help
    }
    try {
        return run(flags);
    } catch (const std::exception& e) { // a checkpoint that cannot be read or written, for one
        std::cerr << "custom_loop: " << e.what() << '\n';
        return 1;
    }
}
