// Loss scaling costs, next to peers in the same run:
//  - the fused unscale pass (widen, × 1/S, finite check, squared norm) over 64 Mi gradient elements in
//    float16 and float32, next to a float32 memcpy of the same element count (bytes counted read +
//    written, as in bench_convert; bench/report.py prints both the bytes and the time ratio);
//  - a whole mixed_float16 training step of a 784-512-512-10 MLP at batch 128 (forward, backward,
//    Adam) with the LossScaleOptimizer, next to the same step with the bare Adam (gradients unscaled):
//    as two benchmarks, and as one that times both in every iteration and reports the median ratio of
//    those pairs (the floor is judged on it: it is what the machine's drifting load disturbs least).
//
// Names: unscale/<dtype>/fused/<n>, copy/float32/<n>, step/<adam|loss_scale_adam>, step_pair/loss_scale_adam.

#include <mixprec/mixprec.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
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
    state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(elements) *
                            std::int64_t(4 + size_of(dtype)));
}

/// One training step of a 784-512-512-10 ReLU MLP in float16 with float32 masters.
struct Mlp {
    std::vector<Variable> vars;
    Tensor x;
    std::vector<std::int32_t> labels;

    Mlp() : x(Tensor::from_floats(Shape{128, 784}, random_floats(128 * 784, 3), Dtype::float16)), labels(128) {
        const std::size_t sizes[] = {784, 512, 512, 10};
        for (std::size_t l = 0; l < 3; ++l) {
            vars.emplace_back(Tensor::from_floats(Shape{sizes[l], sizes[l + 1]},
                                                  random_floats(sizes[l] * sizes[l + 1], 4 + l, 0.05f)),
                              "w");
            vars.emplace_back(Tensor(Shape{sizes[l + 1]}), "b");
        }
        for (auto& v : vars) v.set_working_dtype(Dtype::float16);
        for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::int32_t(i % 10);
    }

    void step(optim::Optimizer& opt) {
        autodiff::GradientTape tape;
        Tensor h = x;
        for (std::size_t l = 0; l < 3; ++l) {
            h = autodiff::matmul(h, vars[2 * l].read()) + vars[2 * l + 1].read();
            if (l < 2) h = autodiff::relu(h);
        }
        Tensor loss = autodiff::sparse_categorical_crossentropy(labels, h);
        loss = opt.scale_loss(loss); // the loss itself without loss scaling
        opt.apply(tape.gradient(loss, vars), vars);
    }
};

std::unique_ptr<optim::Optimizer> make_optimizer(bool scaled);

void bm_step(benchmark::State& state, bool scaled) {
    Mlp mlp;
    const auto opt = make_optimizer(scaled);
    mlp.step(*opt);
    for (auto _ : state) mlp.step(*opt);
}

std::unique_ptr<optim::Optimizer> make_optimizer(bool scaled) {
    auto adam = std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-4f});
    if (!scaled) return adam;
    return std::make_unique<amp::LossScaleOptimizer>(std::move(adam), amp::LossScaleOptions{.initial_scale = 1024});
}

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
}

/// Both steps in every iteration, in alternating order, each timed on its own: the ratio of each pair
/// is taken before the machine's load can drift, and the counters report the medians over pairs.
void bm_step_pair(benchmark::State& state) {
    Mlp bare_mlp, scaled_mlp;
    const auto bare = make_optimizer(false), scaled = make_optimizer(true);
    bare_mlp.step(*bare);
    scaled_mlp.step(*scaled);
    const auto timed = [](auto&& step) {
        const auto start = std::chrono::steady_clock::now();
        step();
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    };
    std::vector<double> ratios, bare_us, scaled_us;
    bool scaled_first = false;
    for (auto _ : state) {
        double b = 0, s = 0;
        if (scaled_first) s = timed([&] { scaled_mlp.step(*scaled); });
        b = timed([&] { bare_mlp.step(*bare); });
        if (!scaled_first) s = timed([&] { scaled_mlp.step(*scaled); });
        scaled_first = !scaled_first;
        ratios.push_back(s / b);
        bare_us.push_back(b);
        scaled_us.push_back(s);
    }
    if (scaled->skipped_steps() != 0)
        state.SkipWithError("the loss-scaled step skipped steps: the comparison would flatter it");
    state.counters["ratio"] = median(ratios);
    state.counters["bare_us"] = median(bare_us);
    state.counters["scaled_us"] = median(scaled_us);
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
        configure(
            benchmark::RegisterBenchmark(("unscale/" + std::string(name_of(d)) + "/fused/" + n).c_str(), bm_unscale, d),
            0.25);
    configure(benchmark::RegisterBenchmark("step/adam", bm_step, false), 0.3);
    configure(benchmark::RegisterBenchmark("step/loss_scale_adam", bm_step, true), 0.3);
    configure(benchmark::RegisterBenchmark("step_pair/loss_scale_adam", bm_step_pair), 0.6);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
