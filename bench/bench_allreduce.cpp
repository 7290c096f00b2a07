// What data-parallel training adds to a step: the sum of the gradients across ranks. Run it under mpirun
// (`mpirun -np 2 build/bench/bench_allreduce`); rank 0 reports, the others only take part.
//
// Names:
//   allreduce/<model>/<float32|float16>  one MpiCommunicator::sum of the model's gradient elements
//   exchange/<model>/<float32|compute>   GradientExchange::reduce of its float16 gradients, as
//                                        LossScaleOptimizer::apply runs it: pack, sum, unscale and check
//   copy/<model>/<float32|float16>       memcpy of as many bytes: the peer, measured in the same run
// Counters: bytes (what one rank sends into the all-reduces) and bytes_per_second.
// Every benchmark runs a fixed number of iterations, so that the ranks' collectives pair up.
#include <mixprec/mixprec.hpp>
#include <mixprec/models/dist/mpi_communicator.hpp>

#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace mixprec;

namespace {

constexpr int iterations = 200;

std::shared_ptr<models::MpiCommunicator>& world() {
    static std::shared_ptr<models::MpiCommunicator> w;
    return w;
}

/// The trainable variables' shapes of a zoo model.
std::vector<autodiff::Shape> gradient_shapes(const std::string& name) {
    models::Sequential model = models::make_model(name);
    model.build(autodiff::Shape{1, 28, 28}, 1);
    std::vector<autodiff::Shape> shapes;
    for (const autodiff::Variable& v : model.trainable_variables()) shapes.push_back(v.value().shape());
    return shapes;
}

std::size_t elements(const std::vector<autodiff::Shape>& shapes) {
    std::size_t n = 0;
    for (const autodiff::Shape& s : shapes) n += s.elements();
    return n;
}

void report(benchmark::State& state, std::size_t bytes) {
    state.counters["bytes"] = double(bytes);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

void bm_allreduce(benchmark::State& state, std::vector<autodiff::Shape> shapes, bool half) {
    const std::size_t n = elements(shapes);
    std::vector<float> f(n, 0.5f);
    std::vector<std::uint16_t> h(n, 0x3800); // 0.5 in float16
    for (auto _ : state) {
        if (half)
            world()->sum(std::span(h), autodiff::Dtype::float16);
        else
            world()->sum(std::span(f));
        std::fill(f.begin(), f.end(), 0.5f); // keep the sums finite and alike every time
        std::fill(h.begin(), h.end(), std::uint16_t{0x3800});
    }
    report(state, n * (half ? 2 : 4));
}

void bm_exchange(benchmark::State& state, std::vector<autodiff::Shape> shapes, amp::GradientTransport transport) {
    std::vector<autodiff::Tensor> grads;
    for (const autodiff::Shape& s : shapes)
        grads.push_back(
            autodiff::Tensor::from_floats(s, std::vector<float>(s.elements(), 0.25f), autodiff::Dtype::float16));
    const std::vector<float> inverse(grads.size(), 1.0f / 1024);
    amp::GradientExchange exchange(world(), {.transport = transport});
    std::vector<std::vector<float>> out;
    for (auto _ : state) {
        const amp::UnscaleResult r = exchange.reduce(grads, inverse, out);
        benchmark::DoNotOptimize(r);
    }
    report(state, exchange.last_bytes());
}

void bm_copy(benchmark::State& state, std::vector<autodiff::Shape> shapes, std::size_t width) {
    const std::size_t bytes = elements(shapes) * width;
    std::vector<unsigned char> a(bytes, 1), b(bytes);
    for (auto _ : state) {
        std::memcpy(b.data(), a.data(), bytes);
        benchmark::DoNotOptimize(b.data());
    }
    report(state, bytes);
}

/// Rank 0 reports; the others run the same benchmarks silently.
class Silent final : public benchmark::BenchmarkReporter {
  public:
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
};

} // namespace

int main(int argc, char** argv) {
    world() = std::make_shared<models::MpiCommunicator>();
    std::vector<char*> args(argv, argv + argc);
    if (world()->rank() != 0) // one rank writes the --benchmark_out file
        std::erase_if(args, [](const char* a) { return std::strncmp(a, "--benchmark_out", 15) == 0; });
    int count = static_cast<int>(args.size());
    benchmark::Initialize(&count, args.data());
    for (const std::string model : {"mlp", "cnn", "vit"}) {
        const std::vector<autodiff::Shape> shapes = gradient_shapes(model);
        for (const bool half : {false, true}) {
            const std::string dtype = half ? "float16" : "float32";
            benchmark::RegisterBenchmark(("allreduce/" + model + "/" + dtype).c_str(), bm_allreduce, shapes, half)
                ->Iterations(iterations)
                ->Repetitions(3)
                ->Unit(benchmark::kMicrosecond);
            benchmark::RegisterBenchmark(("copy/" + model + "/" + dtype).c_str(), bm_copy, shapes, half ? 2 : 4)
                ->Iterations(iterations)
                ->Repetitions(3)
                ->Unit(benchmark::kMicrosecond);
        }
        for (const auto transport : {amp::GradientTransport::float32, amp::GradientTransport::compute})
            benchmark::RegisterBenchmark(
                ("exchange/" + model + "/" + (transport == amp::GradientTransport::float32 ? "float32" : "compute"))
                    .c_str(),
                bm_exchange, shapes, transport)
                ->Iterations(iterations)
                ->Repetitions(3)
                ->Unit(benchmark::kMicrosecond);
    }
    if (world()->rank() == 0) {
        benchmark::RunSpecifiedBenchmarks();
    } else {
        Silent silent;
        benchmark::RunSpecifiedBenchmarks(&silent);
    }
    benchmark::Shutdown();
    world().reset();
    return 0;
}
