// The CPU's arithmetic roof, measured, and each built-in model's training step in GFLOP/s next to it, in one run.
//
// Roof: every thread advances 12 independent chains of vector FMAs (acc = acc·a + b), enough to keep two FMA
// pipes of latency 4-6 busy, at the widest width the CPU has: AVX-512 (vfmadd…ps zmm) where it has avx512f,
// else AVX2 + FMA (ymm), chosen at run time. Where it has avx512_bf16, also vdpbf16ps (two bfloat16
// multiply-adds into each float32 lane); where it has AMX (amx_bf16, and Linux lets the process use the tile
// registers), also tdpbf16ps (a 16 × 32 by 32 × 16 bfloat16 tile product added into a 16 × 16 float32 tile,
// four independent accumulator tiles), the instruction oneDNN's bfloat16 kernels use there. 1 FMA = 2 FLOP.
// Measured on one thread and on all of them (an OpenMP region, omp_get_max_threads() threads, each with its
// own chains): once at start (best of 5 runs of 50 ms, the figure the models are held against) and as
// benchmarks of their own.
//
// Training step: the zoo's mlp, cnn and vit at batch 128 (mixprec-train's default) in float32, mixed_float16
// and mixed_bfloat16, one models::train_step per iteration (forward, loss, backward through the tape, Adam
// inside a LossScaleOptimizer, as mixprec-train builds them) on a fixed synthetic batch. FLOPs per step come
// from the model's layers (flops() below; the convention is in bench/README.md, "Roofline").
//
// Libraries' ceiling (roofline_ceiling.hpp): the float32 step's products alone, each on the fastest kernel
// OpenBLAS and oneDNN offer for its shape, for the models whose products are Dense and Conv2D layers (mlp, cnn):
// the share of the roof a step built on these libraries could reach if nothing else in it cost anything.
//
// Names: roof/<float32|bfloat16>/<avx512|avx2|avx512_bf16|amx_bf16>/<threads>, train_step/<model>/<precision>,
// ceiling/<mlp|cnn>/float32.
// Threads for the steps: MIXPREC_BENCH_THREADS if set, else every hardware thread; the roof is also measured
// at that count, and roof_share divides by the roof at the same count (measured at start); roof_around_share
// by the mean of that roof measured again just before and just after the repetition (about 30 ms each), which
// follows a host whose speed changes during the run.

#include "roofline_ceiling.hpp"

#include <mixprec/mixprec.hpp>

#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <malloc.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace mixprec;
using autodiff::Shape;
using autodiff::Tensor;
using Clock = std::chrono::steady_clock;

// ---- the roof ----

constexpr int chains = 12;
constexpr float decay = 0.999999f; // acc → acc·decay + (1 − decay) stays near 1: no overflow, no subnormals

__attribute__((target("avx2,fma"))) float fma_chains_avx2(std::int64_t iterations) {
    const __m256 a = _mm256_set1_ps(decay), b = _mm256_set1_ps(1 - decay);
    __m256 acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = _mm256_set1_ps(1.0f + float(c) * 1e-3f);
    for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < chains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    }
    for (int c = 1; c < chains; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[0]);
    return lanes[0] + lanes[7];
}

__attribute__((target("avx512f"))) float fma_chains_avx512(std::int64_t iterations) {
    const __m512 a = _mm512_set1_ps(decay), b = _mm512_set1_ps(1 - decay);
    __m512 acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(1.0f + float(c) * 1e-3f);
    for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < chains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    }
    for (int c = 1; c < chains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
    alignas(64) float lanes[16]; // (not _mm512_reduce_add_ps: GCC 12 warns inside it, -Wuninitialized)
    _mm512_store_ps(lanes, acc[0]);
    return lanes[0] + lanes[15];
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chains(std::int64_t iterations) {
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3a80); // bfloat16 2^-10: products 2^-20, sums stay normal
    __m512 acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(float(c));
    for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < chains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, a);
    }
    for (int c = 1; c < chains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
    alignas(64) float lanes[16]; // (not _mm512_reduce_add_ps: GCC 12 warns inside it, -Wuninitialized)
    _mm512_store_ps(lanes, acc[0]);
    return lanes[0] + lanes[15];
}

/// The tile layout of amx_chains: palette 1, tiles 0-7 of 16 rows of 64 bytes (16 float32 or 32 bfloat16).
struct alignas(64) TileConfig {
    std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
    std::uint16_t bytes_per_row[16] = {};
    std::uint8_t rows[16] = {};
};

/// Whether this process may use AMX's tile registers: the CPU has amx_bf16 and Linux grants the request
/// for them (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), which it needs once per process.
bool amx_usable() {
    constexpr long request_permission = 0x1023, tile_data = 18;
    static const bool usable =
        __builtin_cpu_supports("amx-bf16") && syscall(SYS_arch_prctl, request_permission, tile_data) == 0;
    return usable;
}

/// Four accumulator tiles (0-3) each taking a tile product per iteration, from two A tiles (4, 5) and two B
/// tiles (6, 7) of bfloat16 2^-10: each product adds 32 · 2^-20 to every element, so the sums stay normal.
__attribute__((target("amx-tile,amx-bf16"))) float amx_chains(std::int64_t iterations) {
    TileConfig config;
    for (int t = 0; t < 8; ++t) {
        config.rows[t] = 16;
        config.bytes_per_row[t] = 64;
    }
    _tile_loadconfig(&config);
    alignas(64) std::uint16_t operand[16 * 32];
    std::fill(std::begin(operand), std::end(operand), std::uint16_t{0x3a80});
    _tile_loadd(4, operand, 64);
    _tile_loadd(5, operand, 64);
    _tile_loadd(6, operand, 64);
    _tile_loadd(7, operand, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (std::int64_t i = 0; i < iterations; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    alignas(64) float sums[4][16 * 16];
    _tile_stored(0, sums[0], 64);
    _tile_stored(1, sums[1], 64);
    _tile_stored(2, sums[2], 64);
    _tile_stored(3, sums[3], 64);
    _tile_release();
    return sums[0][0] + sums[1][17] + sums[2][34] + sums[3][255];
}

struct RoofKernel {
    std::string format;         ///< "float32" or "bfloat16"
    std::string isa;            ///< "avx512", "avx2", "avx512_bf16", "amx_bf16"
    double flops_per_iteration; ///< per thread: chains × float32 lanes × multiply-adds per lane × 2
    float (*run)(std::int64_t iterations);
};

/// The widest float32 FMA the CPU has (none without AVX2 + FMA), vdpbf16ps where it has avx512_bf16, and
/// tdpbf16ps where the process may use AMX.
std::vector<RoofKernel> roof_kernels() {
    std::vector<RoofKernel> kernels;
    if (__builtin_cpu_supports("avx512f"))
        kernels.push_back({"float32", "avx512", chains * 16 * 2, fma_chains_avx512});
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        kernels.push_back({"float32", "avx2", chains * 8 * 2, fma_chains_avx2});
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"))
        kernels.push_back({"bfloat16", "avx512_bf16", chains * 16 * 2 * 2, dpbf16_chains});
    if (amx_usable()) kernels.push_back({"bfloat16", "amx_bf16", 4 * 16 * 16 * 32 * 2, amx_chains});
    return kernels;
}

/// FLOPs done by `k` on `threads` threads (each its own chains), the chains' sum kept from the optimizer.
double run_roof(const RoofKernel& k, int threads, std::int64_t iterations) {
    float sink = 0;
    int team = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink, team)
    {
        sink += k.run(iterations);
        team += 1;
    }
    benchmark::DoNotOptimize(sink);
    return double(team) * double(iterations) * k.flops_per_iteration;
}

double timed_gflops(const RoofKernel& k, int threads, std::int64_t iterations) {
    const auto start = Clock::now();
    const double flops = run_roof(k, threads, iterations);
    return flops / std::chrono::duration<double>(Clock::now() - start).count() * 1e-9;
}

/// Chain iterations that take about `seconds` on one thread.
std::int64_t iterations_for(const RoofKernel& k, double seconds) {
    const std::int64_t probe = 1 << 20;
    timed_gflops(k, 1, probe);
    const double gflops = timed_gflops(k, 1, probe);
    return std::max(probe, std::int64_t(seconds * gflops * 1e9 / k.flops_per_iteration));
}

void bm_roof(benchmark::State& state, RoofKernel k, int threads, std::int64_t iterations, double at_start) {
    double flops = 0;
    for (auto _ : state) flops += run_roof(k, threads, iterations);
    state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
    state.counters["threads"] = threads;
    state.counters["at_start_GFLOP/s"] = at_start;
}

// ---- FLOPs of a training step ----

/// One matrix product or convolution of a layer's forward pass.
struct Product {
    double flops;     ///< 2·m·n·k, or 2·N·O·Ho·Wo·C·kh·kw
    bool reads_input; ///< its activation operand is the layer's input (else a value computed inside the layer)
};

/// Self-attention on (B, T, D) with H heads of width K: the fused qkv projection, q kᵀ, A v, the output projection.
std::vector<Product> attention(double B, double T, double D, double H, double K, bool qkv_reads_input) {
    return {{2 * B * T * D * 3 * H * K, qkv_reads_input},
            {2 * B * H * T * T * K, false},
            {2 * B * H * T * T * K, false},
            {2 * B * T * H * K * D, false}};
}

/// The forward products of `layer` (built) on a batch. Layers without products (elementwise, normalization,
/// pooling, reshaping, embedding lookups) have none; a kind this function does not know is an error, so that
/// a new layer cannot be counted as free by accident.
std::vector<Product> products(const models::Layer& layer, double B) {
    const Shape& in = layer.input_shape();
    if (const auto* d = dynamic_cast<const models::Dense*>(&layer)) {
        const double k = double(in[in.rank() - 1]), rows = B * double(in.elements()) / k;
        return {{2 * rows * k * double(d->units()), true}};
    }
    if (const auto* c = dynamic_cast<const models::Conv2D*>(&layer)) {
        const Shape& out = layer.output_shape(); // (O, Ho, Wo); in is (C, H, W)
        const auto [kh, kw] = c->kernel_size();
        return {{2 * B * double(out.elements()) * double(in[0] * kh * kw), true}};
    }
    if (const auto* a = dynamic_cast<const models::MultiHeadSelfAttention*>(&layer))
        return attention(B, double(in[0]), double(in[1]), double(a->heads()), double(a->key_dim()), true);
    if (const auto* t = dynamic_cast<const models::TransformerBlock*>(&layer)) {
        // The block keeps its attention private: the head width comes from the fused qkv kernel (D, 3HK).
        const std::vector<autodiff::Variable> vars = t->variables();
        const auto qkv = std::find_if(vars.begin(), vars.end(),
                                      [](const auto& v) { return v.name().ends_with("attention/qkv/kernel"); });
        if (qkv == vars.end()) throw std::logic_error("flops: no attention/qkv/kernel in " + layer.name());
        const double T = double(in[0]), D = double(in[1]), H = double(t->heads()), M = double(t->mlp_width());
        // LayerNorm₁ (trainable γ, β) lies between the block's input and qkv: every product needs dx.
        std::vector<Product> p = attention(B, T, D, H, double(qkv->shape()[1]) / 3 / H, false);
        p.push_back({2 * B * T * D * M, false}); // mlp1
        p.push_back({2 * B * T * M * D, false}); // mlp2
        return p;
    }
    static const std::set<std::string> without_products{
        "Flatten",          "Activation", "Dropout",           "LayerNormalization", "MaxPooling2D",
        "AveragePooling2D", "Patches",    "PositionEmbedding", "Embedding",          "GlobalAveragePooling1D"};
    if (without_products.count(layer.kind())) return {};
    throw std::invalid_argument("flops: no FLOP count for layer kind " + layer.kind());
}

/// FLOPs of one training step of `model` (built) on `batch` examples: matrix products and convolutions only.
/// Forward: 2·m·n·k per product, 2·N·O·Ho·Wo·C·kh·kw per convolution. Backward: twice the forward product (dx
/// and dw) wherever the input's gradient is needed, once (dw only) for a product that reads the model's input,
/// i.e. one in the first layer with variables. Elementwise work (activations, softmax, norms, pooling, the
/// loss, the optimizer) is not counted.
double flops(const models::Sequential& model, std::size_t batch) {
    double total = 0;
    bool input_needs_grad = false; // true once a layer with variables lies upstream
    for (const auto& layer : model.layers()) {
        for (const Product& p : products(*layer, double(batch)))
            total += p.flops * (p.reads_input && !input_needs_grad ? 2 : 3); // forward + backward
        if (!layer->variables().empty()) input_needs_grad = true;
    }
    return total;
}

// ---- the training step ----

constexpr std::size_t batch = 128; // mixprec-train's --batch-size default

/// As mixprec-train with its defaults: Adam (lr 1e-3) inside a LossScaleOptimizer, dynamic with the "mixprec"
/// preset where the policy needs loss scaling (float16), a fixed scale of 1 otherwise (--loss-scale auto).
std::unique_ptr<optim::Optimizer> make_optimizer(const amp::Policy& policy) {
    amp::LossScaleOptions scaling = amp::loss_scale_preset("mixprec", policy.compute_dtype());
    if (!policy.needs_loss_scaling()) {
        scaling.dynamic = false;
        scaling.initial_scale = 1.0f;
    }
    optim::Adam::Options adam;
    adam.learning_rate = 1e-3f;
    return std::make_unique<amp::LossScaleOptimizer>(std::make_unique<optim::Adam>(adam), scaling);
}

/// The roofs at the steps' thread count, measured at start (0 where not measured), and the float32 kernel that
/// measures that roof again around each repetition (the host's speed can change within a run).
struct Roofs {
    double float32 = 0, bfloat16 = 0, amx = 0; // amx: tdpbf16ps
    std::optional<RoofKernel> float32_kernel;
    std::int64_t iterations = 0; ///< of the chains: about 10 ms on each thread
    int threads = 1;

    /// The float32 roof now: the best of three runs of about 10 ms (0 where not measured).
    double float32_now() const {
        double best = 0;
        if (float32_kernel)
            for (int run = 0; run < 3; ++run) best = std::max(best, timed_gflops(*float32_kernel, threads, iterations));
        return best;
    }
};

/// A repetition's roof counters, for `achieved` GFLOP/s: its share of the roof at start, and of the roof
/// around it (the mean of the roof measured just `before` it and just after).
void roof_counters(benchmark::State& state, const Roofs& roofs, double achieved, double before) {
    if (roofs.float32 <= 0) return;
    state.counters["roof_GFLOP/s"] = roofs.float32;
    state.counters["roof_share"] = achieved / roofs.float32;
    const double around = (before + roofs.float32_now()) / 2;
    state.counters["roof_around_GFLOP/s"] = around;
    state.counters["roof_around_share"] = achieved / around;
}

void bm_train_step(benchmark::State& state, std::string model_name, std::string precision, int threads, Roofs roofs) {
    const amp::Policy policy(precision);
    amp::set_global_policy(policy);
    models::Sequential model = models::make_model(model_name);
    model.build(Shape{1, 28, 28}, 1);
    amp::set_global_policy("float32");
    const auto optimizer = make_optimizer(policy);
    const std::vector<autodiff::Variable> variables = model.trainable_variables();
    std::mt19937 gen(20261122);
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f); // as FashionMnist::batch gives them
    std::vector<float> pixels(batch * 28 * 28);
    for (float& p : pixels) p = pixel(gen);
    const Tensor x = Tensor::from_floats(Shape{batch, 1, 28, 28}, pixels);
    std::vector<float> labels(batch); // class indices, as a Dataset gives them
    for (std::size_t i = 0; i < batch; ++i) labels[i] = float(gen() % 10);
    const Tensor y = Tensor::from_floats(Shape{batch}, labels);
    const models::Loss loss = models::Loss::sparse_categorical_crossentropy(/*from_logits=*/true);
    autodiff::Rng dropout_rng(1);
    std::int64_t step = 0;
    const auto train = [&] {
        return models::train_step({model, *optimizer, variables, x, y, loss, ++step, dropout_rng});
    };
    for (int i = 0; i < 3; ++i) train(); // oneDNN primitives, scratch buffers, the heap's working set

    std::int64_t skipped = 0;
    const double roof_before = roofs.float32_now();
    const auto start = Clock::now();
    for (auto _ : state) skipped += train().applied ? 0 : 1;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

    const double gflop = flops(model, batch) * 1e-9;
    const double achieved = gflop * double(state.iterations()) / seconds;
    state.counters["GFLOP/s"] = benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GFLOP/step"] = gflop;
    state.counters["threads"] = threads;
    state.counters["skipped_steps"] = double(skipped); // a skipped step does less work: flagged by report.py
    roof_counters(state, roofs, achieved, roof_before);
    if (roofs.bfloat16 > 0 && policy.compute_dtype() == autodiff::Dtype::bfloat16) {
        state.counters["bf16_roof_GFLOP/s"] = roofs.bfloat16;
        state.counters["bf16_roof_share"] = achieved / roofs.bfloat16;
    }
    if (roofs.amx > 0 && policy.compute_dtype() == autodiff::Dtype::bfloat16) {
        state.counters["amx_roof_GFLOP/s"] = roofs.amx;
        state.counters["amx_roof_share"] = achieved / roofs.amx;
    }
}

/// The libraries' ceiling of `model_name`'s float32 step (roofline_ceiling.hpp): its products alone, each on
/// the fastest kernel found at setup, once per iteration.
void bm_ceiling(benchmark::State& state, std::string model_name, int threads, Roofs roofs) {
    amp::set_global_policy("float32");
    models::Sequential model = models::make_model(model_name);
    model.build(Shape{1, 28, 28}, 1);
    // chosen at the first repetition (timing every candidate takes seconds), printed once
    static std::map<std::string, std::optional<bench::LibraryCeiling>> chosen;
    if (!chosen.count(model_name)) {
        try {
            chosen[model_name] = bench::LibraryCeiling::of(model, batch);
        } catch (const std::runtime_error& e) {
            state.SkipWithError(e.what());
            return;
        }
        if (chosen[model_name])
            std::printf("ceiling of %s: %s\n", model_name.c_str(), chosen[model_name]->choices().c_str());
        std::fflush(stdout);
    }
    const std::optional<bench::LibraryCeiling>& ceiling = chosen[model_name];
    if (!ceiling) {
        state.SkipWithError("products other than Dense and Conv2D: no ceiling");
        return;
    }
    const double roof_before = roofs.float32_now();
    const auto start = Clock::now();
    for (auto _ : state) ceiling->run();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const double gflop = flops(model, batch) * 1e-9;
    state.counters["GFLOP/s"] = benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GFLOP/step"] = gflop;
    state.counters["threads"] = threads;
    roof_counters(state, roofs, gflop * double(state.iterations()) / seconds, roof_before);
}

std::string cpu_model() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
        if (line.starts_with("model name") && line.find(':') != std::string::npos)
            return line.substr(line.find(':') + 2);
    return "unknown";
}

} // namespace

int main(int argc, char** argv) {
    // As mixprec-train: freed activation buffers stay in the heap instead of returning to mmap every step.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

    const int all_threads = omp_get_max_threads(); // before set_blas_threads sets the OpenMP count
    int threads = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("MIXPREC_BENCH_THREADS")) threads = std::atoi(env);
    threads = std::max(threads, 1);
    autodiff::set_blas_threads(threads);
    benchmark::AddCustomContext("mixprec_blas_threads", std::to_string(threads));
    benchmark::AddCustomContext("mixprec_cpu", cpu_model());

    const std::vector<RoofKernel> kernels = roof_kernels();
    if (kernels.empty() || kernels[0].format != "float32")
        std::printf("note: this CPU has neither AVX-512 nor AVX2 + FMA: no float32 roof, no roof_share\n");
    if (std::none_of(kernels.begin(), kernels.end(), [](const auto& k) { return k.format == "bfloat16"; })) {
        std::printf("note: this CPU has no avx512_bf16: the bfloat16 (vdpbf16ps) roof is not measured\n");
        benchmark::AddCustomContext("mixprec_avx512_bf16", "no");
    } else {
        benchmark::AddCustomContext("mixprec_avx512_bf16", "yes");
    }
    const bool amx = std::any_of(kernels.begin(), kernels.end(), [](const auto& k) { return k.isa == "amx_bf16"; });
    if (!amx) std::printf("note: no AMX tiles for this process: the tdpbf16ps roof is not measured\n");
    benchmark::AddCustomContext("mixprec_amx_bf16", amx ? "yes" : "no");
    std::map<std::pair<std::string, int>, double> roof; // (isa, threads) → GFLOP/s at start
    for (const RoofKernel& k : kernels) {
        const std::int64_t iterations = iterations_for(k, 0.05);
        for (int t : std::set<int>{1, all_threads, threads}) {
            double best = 0;
            for (int run = 0; run < 5; ++run) best = std::max(best, timed_gflops(k, t, iterations));
            roof[{k.isa, t}] = best;
            const std::string key = "mixprec_roof_" + k.format + "_" + k.isa + "_threads_" + std::to_string(t);
            benchmark::AddCustomContext(key, std::to_string(best));
            std::printf("roof %s (%s), %d thread%s: %.1f GFLOP/s\n", k.format.c_str(), k.isa.c_str(), t,
                        t == 1 ? "" : "s", best);
            const std::string name = "roof/" + k.format + "/" + k.isa + "/" + std::to_string(t);
            benchmark::RegisterBenchmark(name.c_str(), bm_roof, k, t, iterations / 5, best)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond)
                ->MinTime(0.2)
                ->Repetitions(3)
                ->DisplayAggregatesOnly(true);
        }
    }
    std::fflush(stdout);

    Roofs roofs;
    roofs.bfloat16 = roof[{"avx512_bf16", threads}];
    roofs.amx = roof[{"amx_bf16", threads}];
    if (!kernels.empty() && kernels[0].format == "float32") {
        roofs.float32 = roof[{kernels[0].isa, threads}];
        roofs.float32_kernel = kernels[0];
        roofs.iterations = iterations_for(kernels[0], 0.01);
        roofs.threads = threads;
    }
    for (std::string_view model : models::model_names())
        for (const char* precision : {"float32", "mixed_float16", "mixed_bfloat16"})
            benchmark::RegisterBenchmark(("train_step/" + std::string(model) + "/" + precision).c_str(), bm_train_step,
                                         std::string(model), std::string(precision), threads, roofs)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond)
                ->MinTime(0.3)
                ->Repetitions(5)
                ->DisplayAggregatesOnly(true);
    for (const char* model : {"mlp", "cnn"})
        benchmark::RegisterBenchmark(("ceiling/" + std::string(model) + "/float32").c_str(), bm_ceiling,
                                     std::string(model), threads, roofs)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.3)
            ->Repetitions(5)
            ->DisplayAggregatesOnly(true);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
