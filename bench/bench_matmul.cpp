// Matrix product throughput of mixprec::autodiff::matmul next to a bare cblas_sgemm on float32 buffers of
// the same shape, in the same run.
//
// Each benchmark reports GFLOP/s = 2*M*N*K / time (counter "GFLOPS"). matmul allocates and zeroes its
// output tensor on every call, and for float16 (and bfloat16 on the sgemm route) widens both operands and
// rounds the product; all of that is inside the timed loop, since it is what a caller pays. The sgemm
// peer writes into a preallocated float32 buffer.
//
// Names: sgemm/float32/MxKxN, matmul/float32/MxKxN, matmul/float16/MxKxN,
//        matmul/bfloat16/<automatic|sgemm|onednn>/MxKxN       (a is M x K, b is K x N)
//
// The matmul rows multiply on the process's float32 GEMM library: OpenBLAS's, or oneDNN's with
// MIXPREC_GEMM=onednn (the sgemm peer stays OpenBLAS's).
//
// BLAS threads: MIXPREC_BENCH_THREADS if set, else the number of hardware threads; set for OpenBLAS and
// oneDNN alike through set_blas_threads.

#include <mixprec/mixprec.hpp>

#include <benchmark/benchmark.h>

#include <cblas.h>

#include <cstddef>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace mixprec::autodiff;

struct GemmShape {
    std::size_t m, k, n;
    std::string name() const { return std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n); }
    double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

constexpr GemmShape shapes[] = {
    {512, 512, 512}, {1024, 1024, 1024},                 // square
    {128, 784, 512}, {128, 512, 512},    {128, 512, 10}, // MLP layers: batch 128, 784 -> 512 -> 512 -> 10
};

std::vector<float> random_floats(std::size_t count, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(count);
    for (auto& x : v) x = dist(rng);
    return v;
}

void set_gflops(benchmark::State& state, const GemmShape& s) {
    state.counters["GFLOPS"] = benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_sgemm(benchmark::State& state, GemmShape s) {
    const auto a = random_floats(s.m * s.k, 1), b = random_floats(s.k * s.n, 2);
    std::vector<float> c(s.m * s.n);
    const auto m = static_cast<blasint>(s.m), n = static_cast<blasint>(s.n), k = static_cast<blasint>(s.k);
    for (auto _ : state) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(),
                    n);
        benchmark::DoNotOptimize(c.data());
        benchmark::ClobberMemory();
    }
    set_gflops(state, s);
}

void bm_matmul(benchmark::State& state, GemmShape s, Dtype dtype, MatmulBackend backend) {
    const auto fa = random_floats(s.m * s.k, 1), fb = random_floats(s.k * s.n, 2);
    const Tensor a = Tensor::from_floats(Shape{s.m, s.k}, fa, dtype);
    const Tensor b = Tensor::from_floats(Shape{s.k, s.n}, fb, dtype);
    const MatmulOptions options{false, false, backend};
    benchmark::DoNotOptimize(kernels::matmul(a, b, options).raw()); // warm-up: oneDNN builds its primitive here
    for (auto _ : state) {
        Tensor c = kernels::matmul(a, b, options);
        benchmark::DoNotOptimize(c.raw());
        benchmark::ClobberMemory();
    }
    set_gflops(state, s);
}

const char* backend_name(MatmulBackend b) {
    switch (b) {
    case MatmulBackend::automatic:
        return "automatic";
    case MatmulBackend::sgemm:
        return "sgemm";
    case MatmulBackend::onednn:
        return "onednn";
    }
    return "?";
}

void configure(benchmark::internal::Benchmark* b) {
    // every repetition goes to --benchmark_out; the console shows only mean/median/stddev/cv
    b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1)->Repetitions(10)->DisplayAggregatesOnly(true);
}

} // namespace

int main(int argc, char** argv) {
    int threads = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("MIXPREC_BENCH_THREADS")) threads = std::atoi(env);
    if (threads < 1) threads = 1;
    set_blas_threads(threads);
    benchmark::AddCustomContext("mixprec_blas_threads", std::to_string(threads));
    benchmark::AddCustomContext("mixprec_avx512_bf16", (isa() >= Isa::avx512_bf16) ? "yes" : "no");

    std::vector<MatmulBackend> bf16_backends{MatmulBackend::automatic, MatmulBackend::sgemm};
    if ((isa() >= Isa::avx512_bf16)) bf16_backends.push_back(MatmulBackend::onednn);

    for (const auto& s : shapes) {
        const std::string shape = s.name();
        configure(benchmark::RegisterBenchmark(("sgemm/float32/" + shape).c_str(), bm_sgemm, s));
        for (Dtype d : {Dtype::float32, Dtype::float16})
            configure(benchmark::RegisterBenchmark(("matmul/" + std::string(name_of(d)) + "/" + shape).c_str(),
                                                   bm_matmul, s, d, MatmulBackend::automatic));
        for (MatmulBackend be : bf16_backends)
            configure(
                benchmark::RegisterBenchmark(("matmul/bfloat16/" + std::string(backend_name(be)) + "/" + shape).c_str(),
                                             bm_matmul, s, Dtype::bfloat16, be));
    }

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
