// Where one loss scale cannot serve: a network whose activation gradients span more than float16's range,
// trained in float32, in mixed_float16 with one dynamic loss scale, and in mixed_float16 with a loss scale
// per layer (amp::LayerScales), reporting test accuracy and, from rounding telemetry, how much of each
// layer's activation gradient was lost to underflow and to subnormals.
//
// The network is a five-layer relu MLP with two Rescaling pairs that move whole regions of it by powers of
// two (--shift S, default 12):
//
//   Flatten → Dense(256) → Rescaling(2^S) → Dense(256, no bias) → Rescaling(2^-S)
//           → Dense(256) → Rescaling(2^-S) → Dense(256, no bias) → Rescaling(2^S) → Dense(10)
//
// Scaling by a power of two is exact, relu commutes with it and the scaled layers have no bias, so in
// float32 this is exactly the plain MLP. But the second layer's activations are 2^S larger and so its
// gradients 2^S smaller, and the fourth layer's activations 2^S smaller and its gradients 2^S larger: the
// activation gradients span 2S binades more than the plain MLP's. One loss scale must keep the fourth
// layer's largest gradients below float16's overflow, which pushes the second layer's down into the
// subnormals and below; a scale per layer keeps each in range. (Activations need range too: up to S = 13
// the large region stays below 65504; at 14 it overflows in the forward pass, which no loss scale mends.)
//
//   per_layer_scaling [--data DIR] [--epochs N] [--shift S] [--seed N]
//                     [--optimizer adam|sgd] [--telemetry-every N]
//
// Exit codes: 0 after training, 2 for bad flags, 1 when the data cannot be read.
#include <mixprec/mixprec.hpp>

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace mixprec;
using autodiff::RoundingStats;
using autodiff::Shape;
using autodiff::Tensor;

namespace {

struct Flags {
    std::string data = models::default_fashion_mnist_dir;
    std::int64_t epochs = 1;
    int shift = 12;
    std::uint64_t seed = 1;
    std::int64_t telemetry_every = 10;
    std::string optimizer = "adam";
};

constexpr std::size_t width = 256;

/// The network above.
models::Sequential make_network(int shift) {
    const float up = std::ldexp(1.0f, shift), down = std::ldexp(1.0f, -shift);
    models::Sequential model;
    model.add(models::Flatten());
    model.add(models::Dense(width, "relu"));
    model.add(models::Rescaling(up));
    model.add(models::Dense(width, "relu", /*use_bias=*/false)); // activations ×2^S, gradients ×2^-S
    model.add(models::Rescaling(down));
    model.add(models::Dense(width, "relu"));
    model.add(models::Rescaling(down));
    model.add(models::Dense(width, "relu", /*use_bias=*/false)); // activations ×2^-S, gradients ×2^S
    model.add(models::Rescaling(up));
    model.add(models::Dense(10));
    return model;
}

/// The binades the network moves each Dense layer's activations by (its gradients move the other way).
std::vector<int> activation_shifts(int shift) { return {0, shift, 0, -shift, 0}; }

std::string describe_optimizer(const std::string& name) {
    return name == "adam" ? "Adam (lr 0.001)" : "SGD (lr 0.01, momentum 0.9)";
}

/// Sums every recorded step's telemetry.
class TelemetrySum final : public models::Callback {
  public:
    void on_step_end(models::FitContext&, const models::StepLogs& logs) override {
        if (logs.telemetry) sum_ += *logs.telemetry;
    }
    const amp::Telemetry& sum() const { return sum_; }

  private:
    amp::Telemetry sum_;
};

struct Result {
    double accuracy = 0;
    std::int64_t skipped = 0;
    std::string scales;
    amp::Telemetry telemetry;
};

Result train(const std::string& mode, const Flags& flags, const models::Dataset& train_data,
             const models::Dataset& test_data) {
    amp::set_global_policy(mode == "float32" ? "float32" : "mixed_float16");
    models::Sequential model = make_network(flags.shift);
    model.build(train_data.example_shape(), flags.seed);
    amp::set_global_policy("float32");

    std::unique_ptr<optim::Optimizer> inner;
    if (flags.optimizer == "adam")
        inner = std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3f});
    else
        inner = std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.01f, .momentum = 0.9f});
    std::unique_ptr<amp::LossScaleOptimizer> optimizer;
    if (mode == "float32") // nothing to scale: float32 gradients
        optimizer = std::make_unique<amp::LossScaleOptimizer>(
            std::move(inner), amp::LossScaleOptions{.dynamic = false, .initial_scale = 1.0f});
    else if (mode == "global") // one dynamic scale, mixprec's rule (2^15 to start)
        optimizer = std::make_unique<amp::LossScaleOptimizer>(std::move(inner));
    else // a scale per layer, amp/layer_scales.hpp's rule
        optimizer = std::make_unique<amp::LossScaleOptimizer>(std::move(inner), amp::LossScaleOptions{},
                                                              amp::LayerScaleOptions{});

    TelemetrySum telemetry;
    models::TrainingState state;
    models::FitOptions options{.epochs = flags.epochs, .batch_size = 128, .seed = flags.seed};
    options.telemetry_every = flags.telemetry_every;
    options.callbacks.push_back(&telemetry);
    models::fit(model, *optimizer, train_data, state, options);

    Result r;
    r.accuracy = models::evaluate(model, test_data).accuracy;
    r.skipped = optimizer->skipped_steps();
    if (const amp::LayerScales* scales = optimizer->layer_scales()) {
        r.scales = "exponents";
        for (const amp::LayerScales::Layer& layer : scales->layers())
            r.scales += " " + layer.name + " " + std::to_string(layer.exponent) + ",";
        r.scales += " loss " + std::to_string(scales->loss_exponent());
    } else if (mode != "float32") {
        char text[48];
        std::snprintf(text, sizeof text, "loss scale %g", double(optimizer->current_loss_scale()));
        r.scales = text;
    }
    r.telemetry = telemetry.sum();
    return r;
}

double percent(std::uint64_t part, std::uint64_t whole) {
    return whole == 0 ? 0.0 : 100.0 * double(part) / double(whole);
}

std::string binades(int shift) {
    if (shift == 0) return "x1";
    return "x2^" + std::to_string(shift);
}

int run(const Flags& flags) {
    autodiff::set_blas_threads(1); // as the README's figures were measured
    const models::FashionMnist train_data = models::FashionMnist::load(flags.data, models::Split::train);
    const models::FashionMnist test_data = models::FashionMnist::load(flags.data, models::Split::test);
    std::printf("Flatten -> Dense(256) -> Rescaling(2^%d) -> Dense(256, no bias) -> Rescaling(2^-%d)\n"
                "        -> Dense(256) -> Rescaling(2^-%d) -> Dense(256, no bias) -> Rescaling(2^%d) -> Dense(10)\n"
                "relu after every hidden Dense; %s, batch 128, %lld epoch(s) on %zu examples, seed %llu\n\n",
                flags.shift, flags.shift, flags.shift, flags.shift, describe_optimizer(flags.optimizer).c_str(),
                static_cast<long long>(flags.epochs), train_data.size(), static_cast<unsigned long long>(flags.seed));

    std::map<std::string, Result> results;
    for (const std::string mode : {"float32", "global", "per_layer"}) {
        results[mode] = train(mode, flags, train_data, test_data);
        const Result& r = results[mode];
        std::printf("%-9s test accuracy %.2f%%, %lld skipped steps%s%s\n", mode.c_str(), 100 * r.accuracy,
                    static_cast<long long>(r.skipped), r.scales.empty() ? "" : "; ", r.scales.c_str());
    }

    std::printf("\nActivation gradients flowing back into each Dense layer, share of values rounded to zero "
                "(underflow)\nand to a float16 subnormal, over the steps with telemetry (every %lld):\n\n",
                static_cast<long long>(flags.telemetry_every));
    std::printf("%-8s %-12s %-12s %18s %11s %20s %11s\n", "layer", "activations", "gradients", "global underflow",
                "subnormal", "per_layer underflow", "subnormal");
    const std::vector<int> shifts = activation_shifts(flags.shift);
    const std::vector<std::string> dense = {"dense", "dense_1", "dense_2", "dense_3", "dense_4"};
    for (std::size_t i = 0; i < dense.size(); ++i) {
        const std::string name = dense[i] + "/output_grad";
        const RoundingStats* g = results["global"].telemetry.find(name);
        const RoundingStats* p = results["per_layer"].telemetry.find(name);
        if (g == nullptr || p == nullptr) throw std::runtime_error("no telemetry for " + name);
        std::printf("%-8s %-12s %-12s %17.2f%% %10.2f%% %19.2f%% %10.2f%%\n", dense[i].c_str(),
                    binades(shifts[i]).c_str(), binades(-shifts[i]).c_str(), percent(g->underflow, g->count),
                    percent(g->subnormal, g->count), percent(p->underflow, p->count), percent(p->subnormal, p->count));
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "One loss scale against a scale per layer, on a network whose gradients span more than float16's range"};
    Flags flags;
    app.add_option("--data", flags.data, "directory of the Fashion-MNIST files")->capture_default_str();
    app.add_option("--epochs", flags.epochs, "epochs per run")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{100}))
        ->capture_default_str();
    app.add_option("--shift", flags.shift,
                   "binades the Rescaling pairs move activations by (at 14, float16 activations overflow)")
        ->check(CLI::Range(0, 14))
        ->capture_default_str();
    app.add_option("--optimizer", flags.optimizer, "adam (lr 0.001) or sgd (lr 0.01, momentum 0.9)")
        ->check(CLI::IsMember({"adam", "sgd"}))
        ->capture_default_str();
    app.add_option("--seed", flags.seed, "weights and shuffling")->capture_default_str();
    app.add_option("--telemetry-every", flags.telemetry_every, "count roundings every N steps")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000000}))
        ->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2; // the message, or the help
    }
    try {
        return run(flags);
    } catch (const std::exception& e) {
        std::cerr << "per_layer_scaling: " << e.what() << '\n';
        return 1;
    }
}
