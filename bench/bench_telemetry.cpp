// What rounding telemetry costs a training step: the zoo's models at batch 128, mixprec-train's optimizer,
// one step without telemetry and one with it, alternately in the same loop (so that the machine's drift
// hits both alike), each timed on its own. Telemetry changes no bit, so both steps train one model.
//
// Names: telemetry/<model>/<precision>/<counts|histogram>. Counters: ms_off and ms_on, the mean step times
// without and with telemetry, and overhead_pct = 100 (ms_on / ms_off - 1); "histogram" also counts the
// exponent histograms (what mixprec-train's telemetry plot needs).
// Threads: MIXPREC_BENCH_THREADS if set, else every hardware thread.
#include <mixprec/mixprec.hpp>

#include <benchmark/benchmark.h>
#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <thread>

using namespace mixprec;
using autodiff::Shape;
using autodiff::Tensor;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t batch = 128;

void bm_telemetry(benchmark::State& state, std::string model_name, std::string precision, bool histogram) {
    const amp::Policy policy(precision);
    amp::set_global_policy(policy);
    models::Sequential model = models::make_model(model_name);
    model.build(Shape{1, 28, 28}, 1);
    amp::set_global_policy("float32");
    amp::LossScaleOptions scaling = amp::loss_scale_preset("mixprec", policy.compute_dtype());
    if (!policy.needs_loss_scaling()) scaling = {.dynamic = false, .initial_scale = 1.0f};
    amp::LossScaleOptimizer optimizer(std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3f}),
                                      scaling);
    const std::vector<autodiff::Variable> variables = model.trainable_variables();
    std::mt19937 gen(20261126);
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
    std::vector<float> pixels(batch * 28 * 28), labels(batch);
    for (float& p : pixels) p = pixel(gen);
    for (float& l : labels) l = float(gen() % 10);
    const Tensor x = Tensor::from_floats(Shape{batch, 1, 28, 28}, pixels);
    const Tensor y = Tensor::from_floats(Shape{batch}, labels);
    const models::Loss loss = models::Loss::sparse_categorical_crossentropy(/*from_logits=*/true);
    autodiff::Rng dropout_rng(1);
    std::int64_t step = 0;
    std::size_t entries = 0;
    const auto train = [&](bool telemetry) {
        std::optional<amp::StepTelemetry> recording;
        if (telemetry) recording.emplace(autodiff::RoundingRecorderOptions{.histogram = histogram});
        const auto start = Clock::now();
        models::train_step({model, optimizer, variables, x, y, loss, ++step, dropout_rng});
        const auto seconds = std::chrono::duration<double>(Clock::now() - start).count();
        if (recording) entries = recording->result().entries().size();
        return seconds;
    };
    for (int i = 0; i < 3; ++i) train(i % 2 == 1); // oneDNN primitives, scratch buffers, the heap's working set

    double off = 0, on = 0;
    for (auto _ : state) {
        off += train(false);
        on += train(true);
    }
    const auto n = double(state.iterations());
    state.counters["ms_off"] = 1e3 * off / n;
    state.counters["ms_on"] = 1e3 * on / n;
    state.counters["overhead_pct"] = 100 * (on / off - 1);
    state.counters["entries"] = double(entries);
}

} // namespace

int main(int argc, char** argv) {
    // As mixprec-train: freed activation buffers stay in the heap instead of returning to mmap every step.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    int threads = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("MIXPREC_BENCH_THREADS")) threads = std::atoi(env);
    autodiff::set_blas_threads(std::max(threads, 1));
    benchmark::AddCustomContext("mixprec_blas_threads", std::to_string(threads));
    for (std::string_view model : models::model_names())
        for (const char* precision : {"mixed_float16", "mixed_bfloat16"})
            for (bool histogram : {false, true})
                benchmark::RegisterBenchmark(
                    ("telemetry/" + std::string(model) + "/" + precision + "/" + (histogram ? "histogram" : "counts"))
                        .c_str(),
                    bm_telemetry, std::string(model), std::string(precision), histogram)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond)
                    ->MinTime(1.0)
                    ->Repetitions(3)
                    ->DisplayAggregatesOnly(true);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
