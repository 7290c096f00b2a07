// A model that is not a stack: a residual network written as a Model subclass, trained with fit under
// mixed_float16 with a LossScaleOptimizer, checkpointed every epoch and resumable to the same bits.
//
// The network reads 28×28 Fashion-MNIST images: a stem (Dense 128, relu), then `--blocks` residual blocks,
// each h ← h + Dense(128)(relu(Dense(128)(LayerNorm(h)))) (the pre-norm form of He et al. 2016's identity
// blocks), then LayerNorm and a Dense(10) head. Its forward pass is call(); the layers are created with
// track(), and each builds itself when call() first reaches it, as in Keras.
//
//   residual --epochs 2 --train-examples 6000
//   residual --epochs 1 --train-examples 6000 && residual --epochs 2 --train-examples 6000 --resume residual.ckpt
//
// The two end with the same weights digest. --freeze-stem trains with the stem frozen
// (Layer::set_trainable(false)): its weights stay as initialized, the others learn.
//
//   residual [--data DIR] [--epochs N] [--train-examples N] [--blocks N] [--checkpoint PATH] [--resume PATH]
//            [--freeze-stem]
//
// --epochs counts from the start of the run, also when resuming (fit's initial_epoch). Exit codes: 0 after
// training, 2 for bad flags, 1 when the data or a checkpoint cannot be read or written.
#include <mixprec/mixprec.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

using namespace mixprec;
using autodiff::Shape;
using autodiff::Tensor;

namespace {

class ResidualNetwork final : public models::Model {
  public:
    static constexpr std::size_t width = 128;

    explicit ResidualNetwork(std::size_t blocks) : Model("residual_network") {
        for (std::size_t i = 0; i < blocks; ++i)
            blocks_.push_back(
                {&track(models::LayerNorm()), &track(models::Dense(width, "relu")), &track(models::Dense(width))});
        norm_ = &track(models::LayerNorm());
        head_ = &track(models::Dense(10));
    }

  private:
    struct Block {
        models::LayerNorm* norm;
        models::Dense* expand;
        models::Dense* project;
    };

    // Tracked first, so that they come first in summary() and in variables().
    models::Flatten& flatten_ = track(models::Flatten());
    models::Dense& stem_ = track(models::Dense(width, "relu"));
    std::vector<Block> blocks_;
    models::LayerNorm* norm_ = nullptr;
    models::Dense* head_ = nullptr;

    Tensor call(const Tensor& x, const models::CallContext& context) override {
        Tensor h = stem_(flatten_(x, context), context); // (batch, 128)
        for (const Block& b : blocks_)                   // the identity path carries h past every block
            h = h + (*b.project)((*b.expand)((*b.norm)(h, context), context), context);
        return (*head_)((*norm_)(h, context), context); // logits (batch, 10)
    }
};

/// The first `n` examples of `data` as a dataset of their own (all of them when n is 0 or too large).
models::TensorDataset first_examples(const models::Dataset& data, std::size_t n) {
    if (n == 0 || n > data.size()) n = data.size();
    std::vector<std::size_t> indices(n);
    std::iota(indices.begin(), indices.end(), std::size_t{0});
    Tensor x, y;
    data.batch(indices, x, y);
    return models::TensorDataset(x, y);
}

struct Flags {
    std::string data = models::default_fashion_mnist_dir;
    std::int64_t epochs = 2;
    std::size_t train_examples = 0, blocks = 2;
    std::string checkpoint = "residual.ckpt", resume;
    bool freeze_stem = false;
};

int run(const Flags& flags) {
    const models::TensorDataset train =
        first_examples(models::FashionMnist::load(flags.data, models::Split::train), flags.train_examples);
    const models::FashionMnist test = models::FashionMnist::load(flags.data, models::Split::test);

    amp::set_global_policy("mixed_float16"); // float16 compute, float32 master weights
    ResidualNetwork model(flags.blocks);
    model.build(train.example_shape(), /*seed=*/1);
    if (flags.freeze_stem) model.layer("dense").set_trainable(false);
    auto opt = std::make_shared<amp::LossScaleOptimizer>(
        std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3f}));
    model.compile(opt, "sparse_categorical_crossentropy", {"accuracy"});

    models::FitOptions options{.epochs = flags.epochs, .batch_size = 128, .seed = 1, .validation = &test};
    if (flags.resume.empty()) {
        std::cout << model.summary() << '\n';
    } else {
        // The weights, the optimizer (its slots and loss scale), where the run was, and which layers were frozen.
        models::load_checkpoint(flags.resume, model, *opt, &model.training_state());
        std::printf("resumed from %s after epoch %lld (step %lld)\n", flags.resume.c_str(),
                    static_cast<long long>(model.training_state().epoch),
                    static_cast<long long>(model.training_state().step));
        options.initial_epoch = model.training_state().epoch; // then --epochs counts from the run's start
    }
    models::ProgressBar progress;
    auto checkpoints = std::make_shared<models::ModelCheckpoint>(flags.checkpoint);
    options.callbacks = {&progress, checkpoints};
    model.fit(train, options);

    const models::Evaluation e = model.evaluate(test);
    std::printf("test loss %.4f, accuracy %.2f%%; loss scale %g, %lld skipped steps\n", e.loss, 100 * e.accuracy,
                double(opt->current_loss_scale()), static_cast<long long>(opt->skipped_steps()));
    std::printf("checkpoint %s, step %lld; weights digest %s\n", flags.checkpoint.c_str(),
                static_cast<long long>(model.training_state().step), models::weights_digest(model.variables()).c_str());
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"A residual network (a Model subclass) trained with fit under mixed_float16, resumable"};
    Flags flags;
    app.add_option("--data", flags.data, "directory of the Fashion-MNIST files")->capture_default_str();
    app.add_option("--epochs", flags.epochs, "epochs, counted from the start of the run")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{10000}))
        ->capture_default_str();
    app.add_option("--train-examples", flags.train_examples, "train on the first N examples (0: all 60,000)")
        ->capture_default_str();
    app.add_option("--blocks", flags.blocks, "residual blocks")
        ->check(CLI::Range(std::size_t{0}, std::size_t{64}))
        ->capture_default_str();
    app.add_option("--checkpoint", flags.checkpoint, "where to save a checkpoint after every epoch")
        ->capture_default_str();
    app.add_option("--resume", flags.resume, "continue from this checkpoint")->check(CLI::ExistingFile);
    app.add_flag("--freeze-stem", flags.freeze_stem, "keep the stem's weights as initialized");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2; // the message, or the help
    }
    try {
        return run(flags);
    } catch (const std::exception& e) { // the data or a checkpoint that cannot be read or written, for one
        std::cerr << "residual: " << e.what() << '\n';
        return 1;
    }
}
