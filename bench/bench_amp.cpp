// Loss scaling costs, next to peers in the same run:
//  - the fused unscale pass (widen, × 1/S, finite check, squared norm) over 64 Mi gradient elements in
//    float16 and float32, next to a float32 memcpy of the same element count (bytes counted read +
//    written, as in bench_convert; bench/report.py prints both the bytes and the time ratio);
//  - a whole mixed_float16 training step of a 784-512-512-10 MLP at batch 128 (forward, backward,
//    Adam) with the LossScaleOptimizer, next to the same step with the bare Adam (gradients unscaled).
//
// Names: unscale/<dtype>/fused/<n>, copy/float32/<n>, step/<adam|loss_scale_adam>.

#include <mixprec/mixprec.hpp>

#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <thread>

namespace {

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Shape;
using autodiff::Tensor;
using autodiff::Variable;

constexpr std::size_t elements = std::size_t{64} << 20;

std::vector<float> random_floats(std::size_t n, unsigned seed, float stddev = 1.0f) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d(0.0f, stddev);
    std::vector<float> v(n);
    for (auto& x : v) x = d(gen);
    return v;
}

void bm_copy(benchmark::State& state) {
    const std::vector<float> src = random_floats(elements, 1);
    std::vector<float> dst(elements);
    for (auto _ : state) {
        std::memcpy(dst.data(), src.data(), elements * sizeof(float));
        benchmark::DoNotOptimize(dst.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(elements) * 8);
}

void bm_unscale(benchmark::State& state, Dtype dtype) {
    const Tensor g = Tensor::from_floats(Shape{elements}, random_floats(elements, 2), dtype);
    std::vector<float> out(elements);
    for (auto _ : state) {
        const auto r = amp::unscale(g, 1.0f / 1024, out);
        benchmark::DoNotOptimize(r);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(elements) * std::int64_t(4 + size_of(dtype)));
}

/// One training step of a 784-512-512-10 ReLU MLP in float16 with float32 masters.
struct Mlp {
    std::vector<Variable> vars;
    Tensor x;
    std::vector<std::int32_t> labels;

    Mlp() : x(Tensor::from_floats(Shape{128, 784}, random_floats(128 * 784, 3), Dtype::float16)), labels(128) {
        const std::size_t sizes[] = {784, 512, 512, 10};
        for (std::size_t l = 0; l < 3; ++l) {
            vars.emplace_back(Tensor::from_floats(Shape{sizes[l], sizes[l + 1]}, random_floats(sizes[l] * sizes[l + 1], 4 + l, 0.05f)), "w");
            vars.emplace_back(Tensor(Shape{sizes[l + 1]}), "b");
        }
        for (auto& v : vars) v.set_working_dtype(Dtype::float16);
        for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::int32_t(i % 10);
    }

    void step(optim::Optimizer& opt, amp::LossScaleOptimizer* scaler) {
        autodiff::GradientTape tape;
        Tensor h = x;
        for (std::size_t l = 0; l < 3; ++l) {
            h = autodiff::matmul(h, vars[2 * l].read()) + vars[2 * l + 1].read();
            if (l < 2) h = autodiff::relu(h);
        }
        Tensor loss = autodiff::sparse_categorical_crossentropy(labels, h);
        if (scaler) loss = scaler->scale_loss(loss);
        opt.apply(tape.gradient(loss, vars), vars);
    }
};

void bm_step(benchmark::State& state, bool scaled) {
    Mlp mlp;
    auto adam = [] { return std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-4f}); };
    std::unique_ptr<optim::Optimizer> opt = scaled ? std::unique_ptr<optim::Optimizer>(
                                                         std::make_unique<amp::LossScaleOptimizer>(adam(), amp::LossScaleOptions{.initial_scale = 1024}))
                                                   : adam();
    auto* scaler = dynamic_cast<amp::LossScaleOptimizer*>(opt.get());
    mlp.step(*opt, scaler);
    for (auto _ : state) mlp.step(*opt, scaler);
}

void configure(benchmark::internal::Benchmark* b, double min_time) {
    b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(min_time)->Repetitions(7)->DisplayAggregatesOnly(true);
}

} // namespace

int main(int argc, char** argv) {
    autodiff::set_blas_threads(std::max(1, int(std::thread::hardware_concurrency())));
    const std::string n = std::to_string(elements);
    configure(benchmark::RegisterBenchmark(("copy/float32/" + n).c_str(), bm_copy), 0.25);
    for (Dtype d : {Dtype::float16, Dtype::float32})
        configure(benchmark::RegisterBenchmark(("unscale/" + std::string(name_of(d)) + "/fused/" + n).c_str(), bm_unscale, d), 0.25);
    configure(benchmark::RegisterBenchmark("step/adam", bm_step, false), 0.3);
    configure(benchmark::RegisterBenchmark("step/loss_scale_adam", bm_step, true), 0.3);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
