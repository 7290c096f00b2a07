// The optimizers' update over 1 Mi float32 weights, next to a memcpy of the bytes it moves, measured in the
// same run. Adam reads the weights, m, v and the gradient and writes the weights, m and v: 28 bytes an
// element, which SetBytesProcessed counts (the copy moves as many); SGD with momentum reads the weights,
// the buffer and the gradient and writes the weights and the buffer: 20 bytes.
//
// Names: adam/<state>/<n> and sgd_momentum/<state>/<n> (μ = 0.9) with state
//   ordinary    every gradient an ordinary number;
//   dead_tenth  every tenth weight's gradient exactly zero for 1,500 steps before timing (a dead unit of a
//               layer whose rows hold ten units), so its m (its buffer) has decayed to a subnormal number,
//               as in a long training run; the rest ordinary;
//   dead_all    every gradient zero for 1,500 steps before timing;
// and copy/float32/<n>. MIXPREC_ISA=avx2 times the AVX2 kernel instead of the AVX-512 one, portable the
// portable loop; MIXPREC_NEAR_UNDERFLOW=double or float how the kernels take lanes near underflow (the
// context line near_underflow says which way ran).

#include <mixprec/mixprec.hpp>

#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>

namespace {

using namespace mixprec;
using autodiff::Shape;
using autodiff::Tensor;

constexpr std::size_t elements = std::size_t{1} << 20;
constexpr std::int64_t adam_bytes = 7 * sizeof(float), sgd_bytes = 5 * sizeof(float);

enum class Dead { none, tenth, all };

std::unique_ptr<optim::Optimizer> adam() {
    return std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-4f});
}
std::unique_ptr<optim::Optimizer> sgd_momentum() {
    return std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 1e-2f, .momentum = 0.9f});
}

template <std::unique_ptr<optim::Optimizer> (*make)(), std::int64_t bytes_per_element>
void bm_update(benchmark::State& state, Dead dead) {
    std::mt19937 gen(7);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> w(elements), g(elements);
    for (auto& x : w) x = 0.05f * d(gen);
    for (auto& x : g) x = 1e-3f * d(gen);
    std::vector<autodiff::Variable> vars;
    vars.emplace_back(Tensor::from_floats(Shape{elements}, w), "w");
    const auto opt = make();
    const std::vector<Tensor> ordinary{Tensor::from_floats(Shape{elements}, g)};
    opt->apply(ordinary, vars); // every lane's state nonzero
    if (dead != Dead::none) {
        for (std::size_t i = 0; i < elements; ++i)
            if (dead == Dead::all || i % 10 == 0) g[i] = 0.0f;
    }
    const std::vector<Tensor> grads{Tensor::from_floats(Shape{elements}, g)};
    if (dead != Dead::none)
        for (int step = 0; step < 1500; ++step) opt->apply(grads, vars);
    for (auto _ : state) {
        opt->apply(grads, vars);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(elements) * bytes_per_element);
}

void bm_copy(benchmark::State& state) {
    const std::size_t n = elements * 7 / 2; // Adam's 7 floats an element, read and written as 3.5 each way
    const std::vector<float> src(n, 1.0f);
    std::vector<float> dst(n);
    for (auto _ : state) {
        std::memcpy(dst.data(), src.data(), n * sizeof(float));
        benchmark::DoNotOptimize(dst.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(elements) * adam_bytes);
}

void configure(benchmark::internal::Benchmark* b) {
    b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3)->Repetitions(7)->DisplayAggregatesOnly(true);
}

} // namespace

int main(int argc, char** argv) {
    autodiff::set_blas_threads(std::max(1, int(std::thread::hardware_concurrency())));
    const std::string n = std::to_string(elements);
    configure(benchmark::RegisterBenchmark(("copy/float32/" + n).c_str(), bm_copy));
    const std::pair<const char*, Dead> states[] = {
        {"ordinary", Dead::none}, {"dead_tenth", Dead::tenth}, {"dead_all", Dead::all}};
    for (const auto& [name, dead] : states) {
        configure(benchmark::RegisterBenchmark(("adam/" + std::string(name) + "/" + n).c_str(),
                                               bm_update<adam, adam_bytes>, dead));
        configure(benchmark::RegisterBenchmark(("sgd_momentum/" + std::string(name) + "/" + n).c_str(),
                                               bm_update<sgd_momentum, sgd_bytes>, dead));
    }
    benchmark::AddCustomContext("near_underflow", std::string(optim::name_of(optim::near_underflow())) +
                                                      " (lanes near underflow in " +
                                                      (optim::near_underflow_in_double() ? "double" : "float") + ")");
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
