// Linear regression whose float16 gradients underflow to zero without loss scaling.
//
// y = X w* with X (4096, 16) ~ N(0, 1) and small weights w* (|w*| ≈ 3e-5). The model computes
// pred = X w in the compute dtype and the mean squared error in float32. The gradient that reaches
// pred is 2 (pred - y) / 4096 ≈ 3e-8: about half of float16's smallest subnormal (6e-8), so in float16
// most of it rounds to zero and the weights never learn. Scaling the loss by S moves it into range;
// the LossScaleOptimizer divides by S again before the float32 weights are updated.
//
//   underflow_regression [--steps N] [--seed N]
#include <mixprec/mixprec.hpp>

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <random>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Shape;
using autodiff::Tensor;
using autodiff::Variable;

namespace {

struct Outcome {
    double zero_fraction; // of the gradient elements reaching pred, at the first step
    float final_loss;
    double weight_error; // max |w - w*| / max |w*|
    std::int64_t skipped;
    float final_scale;
};

Outcome train(Dtype dtype, std::unique_ptr<optim::Optimizer> opt, const Tensor& x, const Tensor& y,
              const std::vector<float>& w_true, int steps) {
    Variable w(Tensor(Shape{16, 1}), "w");
    w.set_working_dtype(dtype);
    const Tensor xd = x.to(dtype), yd = y.to(dtype);
    std::size_t zeros = 0, seen = 0;
    float loss_value = 0;
    for (int step = 0; step < steps; ++step) {
        autodiff::GradientTape tape({.persistent = true});
        const Tensor pred = autodiff::matmul(xd, w.read());
        tape.watch(pred);
        const Tensor loss = autodiff::mean_squared_error(yd, pred);
        const Tensor target = opt->scale_loss(loss); // loss · S with loss scaling, the loss itself without
        const Tensor d_pred = tape.gradient(target, {pred})[0];
        if (step == 0) {
            for (float g : d_pred.to_floats()) zeros += g == 0.0f;
            seen += d_pred.size();
        }
        opt->apply(tape.gradient(target, std::vector<Variable>{w}), {w});
        loss_value = loss.flat(0);
    }
    double err = 0, size = 0;
    const auto wv = w.value().to_floats();
    for (std::size_t i = 0; i < wv.size(); ++i) {
        err = std::max(err, std::fabs(double(wv[i]) - w_true[i]));
        size = std::max(size, std::fabs(double(w_true[i])));
    }
    return {double(zeros) / double(seen), loss_value, err / size, opt->skipped_steps(), opt->current_loss_scale()};
}

std::unique_ptr<optim::Optimizer> sgd() {
    return std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.5f});
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"Linear regression whose float16 gradients underflow without loss scaling"};
    int steps = 60;
    unsigned seed = 1;
    app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 100000))->capture_default_str();
    app.add_option("--seed", seed, "random seed")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> xv(4096 * 16), w_true(16);
    for (auto& v : xv) v = normal(gen);
    for (auto& v : w_true) v = 3e-5f * normal(gen);
    const Tensor x = Tensor::from_floats(Shape{4096, 16}, xv), w_star = Tensor::from_floats(Shape{16, 1}, w_true);
    const Tensor y = autodiff::kernels::matmul(x, w_star);

    struct Row {
        const char* name;
        Dtype dtype;
        std::unique_ptr<optim::Optimizer> opt;
    };
    std::vector<Row> rows;
    rows.push_back({"float32", Dtype::float32, sgd()});
    rows.push_back({"float16, no loss scaling", Dtype::float16, sgd()});
    rows.push_back({"float16, fixed scale 4096", Dtype::float16,
                    std::make_unique<amp::LossScaleOptimizer>(
                        sgd(), amp::LossScaleOptions{.dynamic = false, .initial_scale = 4096})});
    rows.push_back({"float16, dynamic scale", Dtype::float16, std::make_unique<amp::LossScaleOptimizer>(sgd())});

    std::printf("linear regression, X (4096, 16), |w*| ~ 3e-5, SGD lr 0.5, %d steps\n\n", steps);
    std::printf("| %-26s | %18s | %12s | %17s | %7s | %11s |\n", "run", "zero grads, step 1", "final loss",
                "max|w-w*|/max|w*|", "skipped", "final scale");
    std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(28, '-').c_str(), std::string(20, '-').c_str(),
                std::string(14, '-').c_str(), std::string(19, '-').c_str(), std::string(9, '-').c_str(),
                std::string(13, '-').c_str());
    for (auto& row : rows) {
        const Outcome o = train(row.dtype, std::move(row.opt), x, y, w_true, steps);
        std::printf("| %-26s | %17.1f%% | %12.3e | %17.3e | %7lld | %11g |\n", row.name, 100 * o.zero_fraction,
                    double(o.final_loss), o.weight_error, static_cast<long long>(o.skipped), double(o.final_scale));
    }
    return 0;
}
