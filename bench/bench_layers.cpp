// Forward + backward of a Dense layer and of conv2d through the tape, in float32, float16 and bfloat16,
// next to the library calls they are made of, measured in the same run: the three GEMMs of each layer
// (forward, input gradient, weight gradient) on ready buffers, with OpenBLAS sgemm for the float32 and
// float16 rows and oneDNN's bfloat16 matmul for the bfloat16 rows (writing bfloat16 for Dense, whose
// products oneDNN rounds, and float32 for conv2d, whose convolutions write float32). The floor: a layer takes at most 1.25×
// the time of its GEMMs (bench/report.py prints the ratios). Max-pooling, which has no arithmetic to speak
// of, is held against a copy of its input: forward and backward read the input once and write its gradient.
// The ViT's attention core (autodiff::self_attention) and layer norm at batch 128 are timed too (no floor;
// bench/report.py leaves them out), the attention next to the same attention composed from the ops
// (reshape, transpose, slice, scale, batched matmul, softmax), which is what it replaces where it fuses.
//
// At the avx512_bf16 level, the bfloat16 weights pass of the cnn's second convolution on ready buffers
// (conv_weights_bf16.hpp: products of pairs of images) next to oneDNN's primitive for the same pass, in
// GFLOP/s: no floor, a measure of the kernel.
//
// Names: layer/dense/<dtype>, layer/<conv2d|conv2d_first|conv2d_rgb>/<dtype>/<im2col|im2col_onednn|onednn>
// (each convolution route; conv2d_first is a one-channel first layer, conv2d_rgb a three-channel one), layer/max_pool2d/<dtype>,
// peer/<dense|conv2d>/<sgemm|onednn>, peer/max_pool2d/copy; vit/self_attention/<dtype>,
// vit/self_attention_ops/float32, vit/layer_norm/<dtype>; pass/conv2d_max_pool_first/<dtype> (the cnn's
// first layer, its ReLU and pooling: the forward pass alone, no floor); pass/conv2d_weights/bfloat16/pairs,
// peer/conv2d_weights/onednn.

#include <mixprec/mixprec.hpp>

#include <mixprec/autodiff/tensor/detail/conv_weights_bf16.hpp>
#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <malloc.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace mixprec::autodiff;

struct Gemm {
    std::size_t m, k, n;
    bool ta, tb;
    bool bf16_out = false; ///< the bfloat16 peer writes bfloat16, as the layer's calls do (else float32)
};

// Dense 784 -> 512 at batch 128 (the dense op: y = x W + b rounded once), dx = dy Wᵀ, dW = xᵀ dy.
const std::vector<Gemm> dense_gemms{
    {128, 784, 512, false, false, true}, {128, 512, 784, false, true, true}, {784, 128, 512, true, false, true}};
// conv2d (128, 32, 13, 13) * (64, 32, 3, 3) -> (128, 64, 11, 11) as im2col GEMMs over P = 128·11·11 rows
// and K = 32·3·3 columns: forward, weight gradient, column gradient.
constexpr std::size_t P = 128 * 11 * 11, K = 32 * 3 * 3;
const std::vector<Gemm> conv_gemms{{P, K, 64, false, true}, {64, P, K, true, false}, {P, 64, K, false, false}};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

void bm_peer_sgemm(benchmark::State& state, std::vector<Gemm> gemms) {
    std::vector<std::vector<float>> a, b, c;
    for (const Gemm& g : gemms) {
        a.push_back(random_floats(g.m * g.k, 1));
        b.push_back(random_floats(g.k * g.n, 2));
        c.emplace_back(g.m * g.n);
    }
    for (auto _ : state)
        for (std::size_t i = 0; i < gemms.size(); ++i) {
            const Gemm& g = gemms[i];
            cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, int(g.m),
                        int(g.n), int(g.k), 1.0f, a[i].data(), int(g.ta ? g.m : g.k), b[i].data(),
                        int(g.tb ? g.k : g.n), 0.0f, c[i].data(), int(g.n));
            benchmark::DoNotOptimize(c[i].data());
        }
}

void bm_peer_onednn(benchmark::State& state, std::vector<Gemm> gemms) {
    std::vector<Tensor> a, b, c;
    for (const Gemm& g : gemms) {
        a.push_back(Tensor::from_floats(Shape{g.m * g.k}, random_floats(g.m * g.k, 1), Dtype::bfloat16));
        b.push_back(Tensor::from_floats(Shape{g.k * g.n}, random_floats(g.k * g.n, 2), Dtype::bfloat16));
        c.emplace_back(Shape{g.m * g.n}, g.bf16_out ? Dtype::bfloat16 : Dtype::float32);
    }
    for (auto _ : state)
        for (std::size_t i = 0; i < gemms.size(); ++i) {
            const Gemm& g = gemms[i];
            detail::onednn_matmul_bf16({1, g.m, g.n, g.k, g.ta, g.tb, false}, a[i].raw(), b[i].raw(), c[i].raw(),
                                       g.bf16_out);
            benchmark::DoNotOptimize(c[i].raw());
        }
}

void bm_dense(benchmark::State& state, Dtype dtype) {
    const Tensor x = Tensor::from_floats(Shape{128, 784}, random_floats(128 * 784, 3), dtype);
    const Tensor w = Tensor::from_floats(Shape{784, 512}, random_floats(784 * 512, 4), dtype);
    const Tensor b = Tensor::from_floats(Shape{512}, random_floats(512, 5), dtype);
    for (auto _ : state) {
        GradientTape tape;
        for (const Tensor* t : {&x, &w, &b}) tape.watch(*t);
        const Tensor y = dense(x, w, b);
        auto grads = tape.gradient(y, {x, w, b}); // dy = ones
        benchmark::DoNotOptimize(grads[1].raw());
    }
}

/// A convolution of the cnn model at batch 128: x (128, c, hw, hw) * w (o, c, 3, 3); and a first layer on
/// three-channel 32 × 32 images (conv2d_rgb, as on CIFAR-10). A first layer's input is a batch of data, whose
/// gradient nobody wants (so x is not watched there).
struct ConvCase {
    const char* name;
    std::size_t c, hw, o;
    bool first;
};
const ConvCase conv_cases[] = {
    {"conv2d", 32, 13, 64, false}, {"conv2d_first", 1, 28, 32, true}, {"conv2d_rgb", 3, 32, 32, true}};

void bm_conv(benchmark::State& state, Dtype dtype, ConvCase shape, ConvBackend backend) {
    const std::size_t c = shape.c, hw = shape.hw, o = shape.o;
    const Tensor x = Tensor::from_floats(Shape{128, c, hw, hw}, random_floats(128 * c * hw * hw, 6), dtype);
    const Tensor w = Tensor::from_floats(Shape{o, c, 3, 3}, random_floats(o * c * 9, 7), dtype);
    const Tensor b = Tensor::from_floats(Shape{o}, random_floats(o, 8), dtype);
    Conv2dOptions options;
    options.backend = backend;
    for (auto _ : state) {
        GradientTape tape;
        for (const Tensor* t : {&x, &w, &b})
            if (t != &x || !shape.first) tape.watch(*t);
        const Tensor y = conv2d(x, w, b, options);
        auto grads = tape.gradient(y, {x, w, b});
        benchmark::DoNotOptimize(grads[1].raw());
    }
}

/// The forward pass of the cnn's first layer with its ReLU and 2 × 2 max pooling (conv2d_max_pool, outside
/// a tape), on the automatic route: from avx2 up the first layer's pass of conv_first_layer.hpp.
void bm_first_pooled(benchmark::State& state, Dtype dtype) {
    const Tensor x = Tensor::from_floats(Shape{128, 1, 28, 28}, random_floats(128 * 784, 6), dtype);
    const Tensor w = Tensor::from_floats(Shape{32, 1, 3, 3}, random_floats(32 * 9, 7), dtype);
    const Tensor b = Tensor::from_floats(Shape{32}, random_floats(32, 8), dtype);
    for (auto _ : state) {
        const Tensor y = conv2d_max_pool(x, w, b, {.relu = true});
        benchmark::DoNotOptimize(y.raw());
    }
}

#if defined(__x86_64__)
/// The weights pass of conv_cases' "conv2d" at batch 128: x (128, 32, 13, 13) and dy (128, 64, 11, 11)
/// bfloat16, dw (64, 32, 3, 3) and db (64) float32.
const detail::conv_shape weights_shape{
    128, 32, 13, 13, 64, 3, 3, 11, 11, {1, 1}, {1, 1}, {0, 0}, detail::conv_operands::bf16};

double weights_pass_flops() {
    const auto& s = weights_shape;
    return 2.0 * double(s.n * s.o * s.ho * s.wo * s.c * s.kh * s.kw);
}

void bm_weights_pairs(benchmark::State& state) {
    const auto& s = weights_shape;
    const Tensor x =
        Tensor::from_floats(Shape{s.n, s.c, s.h, s.w}, random_floats(s.n * s.c * s.h * s.w, 10), Dtype::bfloat16);
    // dy in 16-channel blocks; the values' order does not matter to the time
    const Tensor dy = Tensor::from_floats(Shape{s.n * s.o * s.ho * s.wo}, random_floats(s.n * s.o * s.ho * s.wo, 11),
                                          Dtype::bfloat16);
    std::vector<float> dw(s.o * s.c * s.kh * s.kw), db(s.o);
    for (auto _ : state) {
        detail::bf16_weights_pass(s, x.raw(), dy.raw(), dw.data(), db.data());
        benchmark::DoNotOptimize(dw.data());
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(weights_pass_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_peer_weights_onednn(benchmark::State& state) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    const auto& s = weights_shape;
    const auto d = [](std::size_t v) { return static_cast<dnnl::memory::dim>(v); };
    const dnnl::memory::dims xd{d(s.n), d(s.c), d(s.h), d(s.w)}, wd{d(s.o), d(s.c), d(s.kh), d(s.kw)},
        yd{d(s.n), d(s.o), d(s.ho), d(s.wo)}, bd{d(s.o)};
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    const dnnl::memory::desc x(xd, dt::bf16, tag::any), w(wd, dt::bf16, tag::any), y(yd, dt::f32, tag::any),
        b(bd, dt::f32, tag::x), dy(yd, dt::bf16, tag::any), dw(wd, dt::f32, tag::any);
    const dnnl::convolution_forward::primitive_desc forward(
        {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x, w, b, y, {1, 1}, {0, 0}, {0, 0}},
        engine);
    const dnnl::convolution_backward_weights::primitive_desc pd(
        {dnnl::algorithm::convolution_direct, x, dw, b, dy, {1, 1}, {0, 0}, {0, 0}}, engine, forward);
    const dnnl::convolution_backward_weights pass(pd);
    dnnl::memory xs(pd.src_desc(), engine), dys(pd.diff_dst_desc(), engine), dws(pd.diff_weights_desc(), engine),
        dbs(pd.diff_bias_desc(), engine);
    for (auto [m, seed] : {std::pair{&xs, 10u}, std::pair{&dys, 11u}}) { // bfloat16 values of random floats
        const std::size_t n = m->get_desc().get_size() / 2;
        const Tensor t = Tensor::from_floats(Shape{n}, random_floats(n, seed), Dtype::bfloat16);
        std::memcpy(m->get_data_handle(), t.raw(), t.nbytes());
    }
    for (auto _ : state) {
        pass.execute(
            stream,
            {{DNNL_ARG_SRC, xs}, {DNNL_ARG_DIFF_DST, dys}, {DNNL_ARG_DIFF_WEIGHTS, dws}, {DNNL_ARG_DIFF_BIAS, dbs}});
        stream.wait();
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(weights_pass_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    state.SetLabel(pd.impl_info_str());
}
#endif

/// The cnn model's first pooling: 2×2 windows over (128, 32, 26, 26), forward and backward through the tape.
const Shape pool_input{128, 32, 26, 26};

void bm_max_pool(benchmark::State& state, Dtype dtype) {
    const Tensor x = Tensor::from_floats(pool_input, random_floats(pool_input.elements(), 9), dtype);
    for (auto _ : state) {
        GradientTape tape;
        tape.watch(x);
        const Tensor y = max_pool2d(x, {2, 2});
        auto grads = tape.gradient(y, {x});
        benchmark::DoNotOptimize(grads[0].raw());
    }
}

/// The least any pooling's forward and backward can do: read x once and write an x-sized gradient.
void bm_peer_copy(benchmark::State& state) {
    const std::vector<float> x = random_floats(pool_input.elements(), 9);
    std::vector<float> dx(x.size());
    for (auto _ : state) {
        std::memcpy(dx.data(), x.data(), x.size() * sizeof(float));
        benchmark::DoNotOptimize(dx.data());
        benchmark::ClobberMemory();
    }
}

/// The vit model's attention core at batch 128: qkv (128, 16, 3·64) of 4 heads of 16, and its layer norm's
/// input (128, 16, 64).
const Shape qkv_shape{128, 16, 192}, tokens_shape{128, 16, 64};
constexpr std::size_t vit_heads = 4, vit_key_dim = 16;

/// f(x) forward and backward through the tape (dy = ones), x watched.
template <class F>
void bm_forward_backward(benchmark::State& state, const Tensor& x, F f) {
    for (auto _ : state) {
        GradientTape tape;
        tape.watch(x);
        const Tensor y = f(x);
        auto grads = tape.gradient(y, {x});
        benchmark::DoNotOptimize(grads[0].raw());
    }
}

void bm_self_attention(benchmark::State& state, Dtype dtype) {
    const Tensor qkv = Tensor::from_floats(qkv_shape, random_floats(qkv_shape.elements(), 11), dtype);
    bm_forward_backward(state, qkv, [](const Tensor& x) { return self_attention(x, vit_heads, vit_key_dim); });
}

void bm_peer_attention_from_ops(benchmark::State& state) {
    const Tensor qkv = Tensor::from_floats(qkv_shape, random_floats(qkv_shape.elements(), 11));
    bm_forward_backward(state, qkv, [](const Tensor& x) { return self_attention_from_ops(x, vit_heads, vit_key_dim); });
}

void bm_layer_norm(benchmark::State& state, Dtype dtype) {
    const Tensor x = Tensor::from_floats(tokens_shape, random_floats(tokens_shape.elements(), 12), dtype);
    const Tensor gamma = Tensor::full(Shape{64}, 1.0f).to(dtype), beta = Tensor(Shape{64}, dtype);
    bm_forward_backward(state, x, [&](const Tensor& in) { return layer_norm(in, gamma, beta); });
}

void configure(benchmark::internal::Benchmark* b) {
    b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2)->Repetitions(7)->DisplayAggregatesOnly(true);
}

} // namespace

int main(int argc, char** argv) {
    // As mixprec-train: freed activation buffers stay in the heap instead of returning to mmap every call.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    int threads = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("MIXPREC_BENCH_THREADS")) threads = std::atoi(env);
    set_blas_threads(threads < 1 ? 1 : threads);
    benchmark::AddCustomContext("mixprec_blas_threads", std::to_string(threads < 1 ? 1 : threads));

    for (const auto& [name, gemms] : {std::pair{"dense", dense_gemms}, std::pair{"conv2d", conv_gemms}}) {
        configure(benchmark::RegisterBenchmark((std::string("peer/") + name + "/sgemm").c_str(), bm_peer_sgemm, gemms));
        if ((isa() >= Isa::avx512_bf16))
            configure(
                benchmark::RegisterBenchmark((std::string("peer/") + name + "/onednn").c_str(), bm_peer_onednn, gemms));
    }
#if defined(__x86_64__)
    if (isa() >= Isa::avx512_bf16) {
        configure(benchmark::RegisterBenchmark("pass/conv2d_weights/bfloat16/pairs", bm_weights_pairs));
        configure(benchmark::RegisterBenchmark("peer/conv2d_weights/onednn", bm_peer_weights_onednn));
    }
#endif
    configure(benchmark::RegisterBenchmark("peer/max_pool2d/copy", bm_peer_copy));
    configure(benchmark::RegisterBenchmark("vit/self_attention_ops/float32", bm_peer_attention_from_ops));
    for (Dtype d : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
        const std::string dtype(name_of(d));
        configure(benchmark::RegisterBenchmark(("layer/max_pool2d/" + dtype).c_str(), bm_max_pool, d));
        configure(benchmark::RegisterBenchmark(("layer/dense/" + dtype).c_str(), bm_dense, d));
        configure(benchmark::RegisterBenchmark(("vit/self_attention/" + dtype).c_str(), bm_self_attention, d));
        configure(benchmark::RegisterBenchmark(("vit/layer_norm/" + dtype).c_str(), bm_layer_norm, d));
        configure(benchmark::RegisterBenchmark(("pass/conv2d_max_pool_first/" + dtype).c_str(), bm_first_pooled, d));
        for (const ConvCase& shape : conv_cases)
            for (ConvBackend backend : {ConvBackend::im2col, ConvBackend::im2col_onednn, ConvBackend::onednn})
                configure(benchmark::RegisterBenchmark(
                    ("layer/" + std::string(shape.name) + "/" + dtype + "/" + std::string(name_of(backend))).c_str(),
                    bm_conv, d, shape, backend));
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
