// Bulk conversion throughput: narrow (float32 -> format) and widen (format -> float32), next to a plain
// float32 memcpy of the same element count.
//
// Every benchmark reports bytes/second counting bytes READ + WRITTEN per element:
//   copy float32 -> float32      4 + 4 = 8
//   narrow float32 -> 16-bit     4 + 2 = 6      widen 16-bit -> float32   2 + 4 = 6
//   narrow float32 -> 8-bit      4 + 1 = 5      widen 8-bit -> float32    1 + 4 = 5
// so the ratio of a conversion's rate to the copy's rate at the same size says how close the conversion
// runs to the memory system's speed. bench/report.py computes that ratio from the JSON output.
//
// MX block rounding (mx_round, mx_round_columns: float32 -> float32, 4 + 4 = 8 bytes, rows of 512 values)
// runs next to the same copy; it is what an MXFP8 product adds to each operand. So does stochastic
// rounding (narrow_stochastic, counted as narrow), the gradient cast of mixed_float8 when asked for.
//
// Names: narrow/<format>/<path>/<elements>, widen/<format>/<path>/<elements>, copy/float32/<elements>,
// mx_round/<element>/<rows|columns>/<elements>, narrow_stochastic/<format>/<path>/<elements>.

#include <mixprec/mixprec.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace mixprec::autodiff;

constexpr std::size_t large_elements = std::size_t{64} << 20; // 64 Mi floats: 256 MiB, far beyond every cache
constexpr std::size_t l2_elements = std::size_t{64}
                                    << 10; // 64 Ki floats: 256 KiB, fits a 1 MiB L2 with its destination

constexpr Dtype narrow_formats[] = {Dtype::float16, Dtype::bfloat16, Dtype::cbfloat16, Dtype::float8_e4m3,
                                    Dtype::float8_e5m2};

/// A 64-byte aligned, page-touched byte buffer.
struct Buffer {
    struct Free {
        void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
    };
    std::unique_ptr<std::byte[], Free> bytes;

    explicit Buffer(std::size_t n) : bytes(static_cast<std::byte*>(::operator new[](n, std::align_val_t{64}))) {
        std::memset(bytes.get(), 0, n); // fault the pages in before anything is timed
    }
    void* get() const { return bytes.get(); }
};

/// Test data of one size: a float32 source, a float32-sized destination, and the source narrowed to each
/// format (the input of the widen benchmarks). Built on first use and kept for the whole run.
struct SizeData {
    std::size_t n;
    Buffer src, dst;
    std::map<Dtype, Buffer> narrowed;

    explicit SizeData(std::size_t elements) : n(elements), src(elements * 4), dst(elements * 4) {
        // Mostly uniform in +-100 (normals of every format), one in eight a small magnitude 2^[-12, 0) so
        // the low exponents are exercised too (some of these are subnormal in the FP8 formats).
        std::mt19937_64 rng(20261122);
        std::uniform_real_distribution<float> wide(-100.0f, 100.0f), expo(-12.0f, 0.0f);
        std::uniform_int_distribution<int> pick(0, 7);
        auto* s = static_cast<float*>(src.get());
        for (std::size_t i = 0; i < n; ++i) {
            if (pick(rng) == 0) {
                const float m = std::exp2(expo(rng));
                s[i] = (rng() & 1) ? m : -m;
            } else {
                s[i] = wide(rng);
            }
        }
        for (Dtype d : narrow_formats) {
            auto [it, _] = narrowed.emplace(d, Buffer(n * size_of(d)));
            narrow(s, it->second.get(), n, d);
        }
    }
};

SizeData& data_for(std::size_t n) {
    static std::map<std::size_t, std::unique_ptr<SizeData>> cache;
    auto& slot = cache[n];
    if (!slot) slot = std::make_unique<SizeData>(n);
    return *slot;
}

/// Sets an instruction-set level for the lifetime of a benchmark function, restoring the previous one.
struct PathGuard {
    Isa saved = isa();
    explicit PathGuard(Isa p) { set_isa(p); }
    ~PathGuard() { set_isa(saved); }
};

void bm_copy(benchmark::State& state, std::size_t n) {
    auto& d = data_for(n);
    const void* src = d.src.get();
    void* dst = d.dst.get();
    for (auto _ : state) {
        std::memcpy(dst, src, n * sizeof(float));
        benchmark::DoNotOptimize(dst);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 8));
    state.SetLabel("memcpy");
}

void bm_narrow(benchmark::State& state, Dtype to, Isa path, std::size_t n) {
    auto& d = data_for(n);
    PathGuard guard(path);
    const auto* src = static_cast<const float*>(d.src.get());
    void* dst = d.dst.get();
    for (auto _ : state) {
        narrow(src, dst, n, to);
        benchmark::DoNotOptimize(dst);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * (4 + size_of(to))));
    state.SetLabel(std::string(name_of(path)));
}

void bm_narrow_stochastic(benchmark::State& state, Dtype to, std::size_t n) {
    auto& d = data_for(n);
    const auto* src = static_cast<const float*>(d.src.get());
    void* dst = d.dst.get();
    std::uint64_t key = 0;
    for (auto _ : state) {
        narrow_stochastic(src, dst, n, to, ++key, 0);
        benchmark::DoNotOptimize(dst);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * (4 + size_of(to))));
    state.SetLabel("stochastic");
}

void bm_widen(benchmark::State& state, Dtype from, Isa path, std::size_t n) {
    auto& d = data_for(n);
    PathGuard guard(path);
    const void* src = d.narrowed.at(from).get();
    auto* dst = static_cast<float*>(d.dst.get());
    for (auto _ : state) {
        widen(src, from, dst, n);
        benchmark::DoNotOptimize(dst);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * (4 + size_of(from))));
    state.SetLabel(std::string(name_of(path)));
}

void bm_mx_round(benchmark::State& state, Dtype element, bool columns, std::size_t n) {
    auto& d = data_for(n);
    const auto* src = static_cast<const float*>(d.src.get());
    auto* dst = static_cast<float*>(d.dst.get());
    constexpr std::size_t cols = 512;
    for (auto _ : state) {
        (columns ? mx_round_columns : mx_round)(src, n / cols, cols, element, dst);
        benchmark::DoNotOptimize(dst);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 8));
    state.SetLabel(columns ? "blocks down the columns" : "blocks along the rows");
}

template <class F, class... Args>
void add(const std::string& name, std::size_t n, F fn, Args... args) {
    auto* b = benchmark::RegisterBenchmark(name.c_str(), fn, args..., n);
    b->UseRealTime()->Unit(benchmark::kMicrosecond);
    b->MinTime(n >= large_elements ? 0.25 : 0.1);
    // every repetition goes to --benchmark_out; the console shows only mean/median/stddev/cv
    b->Repetitions(7)->DisplayAggregatesOnly(true);
}

} // namespace

int main(int argc, char** argv) {
    const Isa best = isa();
    benchmark::AddCustomContext("mixprec_isa", std::string(name_of(best)));
    benchmark::AddCustomContext("mixprec_avx512_bf16", best >= Isa::avx512_bf16 ? "yes" : "no");

    for (std::size_t n : {large_elements, l2_elements}) {
        const std::string size = std::to_string(n);
        add("copy/float32/" + size, n, bm_copy);
        for (Dtype d : narrow_formats) {
            const std::string fmt(name_of(d));
            add("narrow/" + fmt + "/" + std::string(name_of(best)) + "/" + size, n, bm_narrow, d, best);
            add("widen/" + fmt + "/" + std::string(name_of(best)) + "/" + size, n, bm_widen, d, best);
        }
        for (Dtype e : {Dtype::float8_e4m3, Dtype::float8_e5m2})
            for (bool columns : {false, true})
                add("mx_round/" + std::string(name_of(e)) + (columns ? "/columns/" : "/rows/") + size, n, bm_mx_round,
                    e, columns);
        for (Dtype d : {Dtype::bfloat16, Dtype::float8_e5m2})
            add("narrow_stochastic/" + std::string(name_of(d)) + "/" + std::string(name_of(best)) + "/" + size, n,
                bm_narrow_stochastic, d);
        if (n == l2_elements && best != Isa::portable) // reference: the plain C++ kernels
            for (Dtype d : {Dtype::float16, Dtype::bfloat16})
                add("narrow/" + std::string(name_of(d)) + "/portable/" + size, n, bm_narrow, d, Isa::portable);
    }

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
