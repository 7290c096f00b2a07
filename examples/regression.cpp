// Regression on arrays of your own: NumPy files in, a trained MLP and its validation error out.
//
// x.npy holds the examples, (n, features...), and y.npy their targets, (n,) or (n, outputs); any element
// type NumPy saves as float32, float64, float16 or integers. The last 20% of the rows are held out for
// validation, as Keras's validation_split does (shuffle rows that come in a meaningful order). Features and targets are standardized with the statistics of
// the training rows, a small MLP (Dense(64, relu), Dense(64, relu), Dense(outputs)) is fitted with Adam to
// the mean squared error under the precision asked for, and training stops once the validation loss has
// not improved for 5 epochs, keeping the best weights. The validation MSE and MAE are printed in y's units.
//
// Without --x and --y, a synthetic problem made in memory is used: y = sin(x0) + x1·x2 + noise, 2,000
// examples of 8 features. --write-demo DIR saves it as DIR/x.npy and DIR/y.npy, to show the format.
//
//   regression [--x x.npy --y y.npy] [--epochs N] [--precision float32|mixed_float16|mixed_bfloat16]
//              [--csv log.csv] [--write-demo DIR]
//
// Exit codes: 0 after training, 2 for bad flags or arrays that cannot be used, 1 for anything else (a file
// that cannot be written, for one).
#include <mixprec/mixprec.hpp>

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Shape;
using autodiff::Tensor;

namespace {

constexpr float noise_std = 0.1f; // of the synthetic problem's targets

/// Examples and their targets, row i of each belonging together.
struct Arrays {
    Tensor x; // (n, features...) float32
    Tensor y; // (n, outputs) float32
};

/// y = sin(x0) + x1·x2 + ε with x ~ N(0, 1)^8 and ε ~ N(0, noise_std²), from a fixed seed.
Arrays synthetic_problem() {
    constexpr std::size_t n = 2000, features = 8;
    std::mt19937 gen(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(n * features), y(n);
    for (std::size_t i = 0; i < n; ++i) {
        float* row = &x[i * features];
        for (std::size_t j = 0; j < features; ++j) row[j] = normal(gen);
        y[i] = std::sin(row[0]) + row[1] * row[2] + noise_std * normal(gen);
    }
    return {Tensor::from_floats(Shape{n, features}, x), Tensor::from_floats(Shape{n, 1}, y)};
}

/// The arrays of two .npy files, checked: npy_error for a file that cannot be read, std::invalid_argument
/// saying what is wrong with arrays that cannot be used together.
Arrays load_arrays(const std::string& x_path, const std::string& y_path) {
    Tensor x = models::to_tensor(models::read_npy(x_path)).to(Dtype::float32);
    Tensor y = models::to_tensor(models::read_npy(y_path)).to(Dtype::float32);
    auto refuse = [](const std::string& path, const std::string& why) {
        throw std::invalid_argument(path + ": " + why);
    };
    if (x.rank() == 0) refuse(x_path, "a scalar; expected (examples, features...)");
    if (y.rank() == 0 || y.rank() > 2)
        refuse(y_path, y.shape().to_string() + "; expected (examples,) or (examples, outputs)");
    const std::size_t n = x.shape()[0];
    if (y.shape()[0] != n)
        refuse(y_path,
               std::to_string(y.shape()[0]) + " targets for the " + std::to_string(n) + " examples of " + x_path);
    if (n < 5) refuse(x_path, std::to_string(n) + " examples; at least 5 are needed to hold out 20% for validation");
    if (x.size() == 0 || y.size() == 0) refuse(x.size() == 0 ? x_path : y_path, "examples without any values");
    auto check_finite = [&](const Tensor& t, const std::string& path) {
        const std::vector<float> values = t.to_floats();
        for (std::size_t i = 0; i < values.size(); ++i)
            if (!std::isfinite(values[i]))
                refuse(path, "element " + std::to_string(i) + " (row " + std::to_string(i / (t.size() / n)) + ") is " +
                                 std::to_string(values[i]) + " in float32; only finite values can be learned");
    };
    check_finite(x, x_path);
    check_finite(y, y_path);
    // One feature or one target may come without its axis: (n,) is (n, 1).
    if (x.rank() == 1) x = x.reshape(Shape{n, 1});
    if (y.rank() == 1) y = y.reshape(Shape{n, 1});
    return {x, y};
}

void write_demo(const std::filesystem::path& dir) {
    const Arrays demo = synthetic_problem();
    std::filesystem::create_directories(dir);
    models::write_npy(dir / "x.npy", models::from_tensor(demo.x));
    models::write_npy(dir / "y.npy", models::from_tensor(demo.y.reshape(Shape{demo.y.shape()[0]})));
    std::printf("wrote %s %s and %s %s, float32; train on them with\n  regression --x %s --y %s\n",
                (dir / "x.npy").c_str(), demo.x.shape().to_string().c_str(), (dir / "y.npy").c_str(),
                Shape{demo.y.shape()[0]}.to_string().c_str(), (dir / "x.npy").c_str(), (dir / "y.npy").c_str());
}

/// Brings each column (a feature or a target) to mean 0 and standard deviation 1 with the statistics of the
/// training rows, as a Keras Normalization layer adapted to them would: an MLP learns best from values of
/// order 1, and float16 holds nothing beyond 65504. A constant column is only shifted.
class Standardizer {
  public:
    explicit Standardizer(const Tensor& train) : mean_(autodiff::mean(train, {0})) { // train: (n, columns...)
        std::vector<float> deviation = autodiff::sqrt(autodiff::mean(autodiff::square(train - mean_), {0})).to_floats();
        for (float& d : deviation)
            if (!(d > 0)) d = 1.0f;
        std_ = Tensor::from_floats(mean_.shape(), deviation);
    }
    Tensor operator()(const Tensor& values) const { return (values - mean_) / std_; }
    Tensor invert(const Tensor& standardized) const { return standardized * std_ + mean_; }

  private:
    Tensor mean_, std_; // (columns...)
};

/// The mean squared and the mean absolute difference of two tensors of the same shape.
std::pair<double, double> mse_mae(const Tensor& y_true, const Tensor& y_pred) {
    const std::vector<float> t = y_true.to_floats(), p = y_pred.to_floats();
    double squared = 0, absolute = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
        const double d = double(p[i]) - double(t[i]);
        squared += d * d;
        absolute += std::fabs(d);
    }
    return {squared / double(t.size()), absolute / double(t.size())};
}

struct Flags {
    std::string x, y, precision = "mixed_float16", csv, write_demo;
    std::int64_t epochs = 100;
};

int run(const Flags& flags) {
    if (!flags.write_demo.empty()) {
        write_demo(flags.write_demo);
        return 0;
    }
    const bool synthetic = flags.x.empty();
    const Arrays arrays = synthetic ? synthetic_problem() : load_arrays(flags.x, flags.y);
    if (synthetic)
        std::printf("no --x/--y: a synthetic problem, y = sin(x0) + x1*x2 + noise (std %g), %zu examples of %zu "
                    "features\n",
                    double(noise_std), arrays.x.shape()[0], arrays.x.shape()[1]);

    // The first 80% of the rows train, the last 20% validate; both are standardized as the training rows are.
    const std::size_t n = arrays.x.shape()[0], n_train = n - n / 5;
    const Tensor x_train = autodiff::slice(arrays.x, 0, 0, n_train), x_val = autodiff::slice(arrays.x, 0, n_train, n);
    const Tensor y_train = autodiff::slice(arrays.y, 0, 0, n_train), y_val = autodiff::slice(arrays.y, 0, n_train, n);
    const Standardizer x_scale(x_train), y_scale(y_train);
    const models::TensorDataset train(x_scale(x_train), y_scale(y_train));
    const models::TensorDataset validation(x_scale(x_val), y_scale(y_val));

    // Layers built under the global policy compute in its dtype and keep float32 master weights.
    amp::set_global_policy(flags.precision);
    const std::size_t outputs = arrays.y.shape()[1];
    models::Sequential model{models::Flatten(), models::Dense(64, "relu"), models::Dense(64, "relu"),
                             models::Dense(outputs)};
    model.build(train.example_shape(), /*seed=*/1);

    // float16 gradients underflow without loss scaling; bfloat16 has float32's range and float32 needs none.
    std::unique_ptr<optim::Optimizer> adam =
        std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3f});
    std::shared_ptr<optim::Optimizer> optimizer;
    if (amp::global_policy().needs_loss_scaling())
        optimizer = std::make_shared<amp::LossScaleOptimizer>(std::move(adam));
    else
        optimizer = std::move(adam);
    model.compile(optimizer, "mean_squared_error", {"mae"});
    std::printf("training on %zu examples, validating on the last %zu: MLP %zu-64-64-%zu (%zu parameters), %s, %s\n",
                n_train, n - n_train, train.example_shape().elements(), outputs, model.count_params(),
                flags.precision.c_str(), optimizer->kind().c_str());

    auto stop = std::make_shared<models::EarlyStopping>(
        models::EarlyStopping::Options{.monitor = "val_loss", .patience = 5, .restore_best_weights = true});
    models::FitOptions options{
        .epochs = flags.epochs, .batch_size = 32, .validation = &validation, .callbacks = {stop}};
    if (!flags.csv.empty()) options.callbacks.push_back(std::make_shared<models::CSVLogger>(flags.csv));
    const std::vector<models::EpochLogs> history = model.fit(train, options);

    // Every 10th epoch and the last. A metric is logged under the name it was given: "mae", and "val_mae" on
    // the validation data.
    std::printf("  epoch    loss  val_loss  val_mae   (standardized)\n");
    for (const models::EpochLogs& e : history)
        if ((e.epoch + 1) % 10 == 0 || &e == &history.back())
            std::printf("  %5lld  %.4f    %.4f   %.4f\n", static_cast<long long>(e.epoch + 1), e.train_loss,
                        *e.validation_loss, e.get("val_mae").value_or(NAN));
    if (stop->stopped_epoch())
        std::printf("stopped early after epoch %lld; ", static_cast<long long>(*stop->stopped_epoch() + 1));
    if (stop->best_epoch())
        std::printf("the weights are those of epoch %lld, whose val_loss was the best\n",
                    static_cast<long long>(*stop->best_epoch() + 1));
    if (!flags.csv.empty()) std::printf("per-epoch log written to %s\n", flags.csv.c_str());

    // The predictions, brought back to y's units, against the held-out targets.
    const auto [mse, mae] = mse_mae(y_val, y_scale.invert(model.predict(validation)));
    std::printf("validation MSE %.4f, MAE %.4f", mse, mae);
    if (synthetic) // a perfect model is left with the noise: E[ε²] = σ², E|ε| = σ·√(2/π)
        std::printf(" (the noise alone: MSE %.4f, MAE %.4f)", double(noise_std * noise_std),
                    noise_std * std::sqrt(2.0 / std::numbers::pi));
    std::printf("\n");
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"Regression on arrays of your own (.npy), with early stopping, in mixed precision"};
    Flags flags;
    auto* x = app.add_option("--x", flags.x, "examples, (n, features...)")->check(CLI::ExistingFile);
    auto* y = app.add_option("--y", flags.y, "targets, (n,) or (n, outputs)")->check(CLI::ExistingFile);
    x->needs(y);
    y->needs(x);
    app.add_option("--epochs", flags.epochs, "most epochs to train")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000}))
        ->capture_default_str();
    app.add_option("--precision", flags.precision, "dtype policy")
        ->check(CLI::IsMember({"float32", "mixed_float16", "mixed_bfloat16"}))
        ->capture_default_str();
    app.add_option("--csv", flags.csv, "write a CSV log of every epoch here");
    app.add_option("--write-demo", flags.write_demo,
                   "write the synthetic problem as DIR/x.npy and DIR/y.npy, then exit")
        ->excludes(x)
        ->excludes(y);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2; // the message, or the help
    }
    try {
        return run(flags);
    } catch (const models::npy_error& e) { // a file that is not an array we read
        std::cerr << "regression: " << e.what() << '\n';
        return 2;
    } catch (const std::invalid_argument& e) { // arrays that do not fit together
        std::cerr << "regression: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "regression: " << e.what() << '\n';
        return 1;
    }
}
