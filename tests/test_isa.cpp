// Instruction-set levels: MIXPREC_ISA and set_isa, oneDNN's cap, and the promise that conversions,
// elementwise kernels, optimizers, the unscale pass and the loss-scale rules give the same bits at every
// level, down to whole training runs. (Conversions are checked pattern by pattern in test_convert.cpp, the
// unscale pass in test_loss_scale_optimizer.cpp.) scripts/test runs this suite once per level as well.
#define BOOST_TEST_MODULE isa
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>

#include <oneapi/dnnl/dnnl_types.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Isa;
using autodiff::Shape;
using autodiff::Tensor;

namespace {

/// Sets every available level in turn and restores the highest afterwards.
struct each_level {
    ~each_level() { autodiff::set_isa(autodiff::max_isa()); }
    template <class F>
    void operator()(F f) const {
        for (Isa level : autodiff::available_isas()) {
            autodiff::set_isa(level);
            BOOST_TEST_CONTEXT("level " << autodiff::name_of(level)) { f(level); }
        }
    }
};

std::vector<unsigned char> bytes_of(const Tensor& t) {
    const auto* p = static_cast<const unsigned char*>(t.raw());
    return {p, p + t.size() * autodiff::size_of(t.dtype())};
}

/// The message of the isa_error f throws, or "" when it throws none.
std::string isa_error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const autodiff::isa_error& e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

} // namespace

BOOST_AUTO_TEST_CASE(levels_follow_the_cpu_and_the_cap) {
    const auto levels = autodiff::available_isas();
    BOOST_REQUIRE(!levels.empty());
    BOOST_TEST((levels.front() == Isa::portable));
    BOOST_TEST((levels.back() == autodiff::max_isa()));
    BOOST_TEST((autodiff::isa() == autodiff::max_isa())); // the default: the highest allowed
    BOOST_TEST((autodiff::max_isa() <= autodiff::cpu_isa()));
    const char* env = std::getenv("MIXPREC_ISA");
    if (env == nullptr || std::string_view(env).empty() || std::string_view(env) == "native") {
        BOOST_TEST((autodiff::max_isa() == autodiff::cpu_isa()));
        BOOST_TEST(!autodiff::detail::requested_isa().has_value());
    } else {
        BOOST_TEST(autodiff::name_of(autodiff::max_isa()) == env);
        BOOST_TEST((autodiff::detail::requested_isa() == autodiff::max_isa()));
    }
    BOOST_TEST_MESSAGE("CPU best " << autodiff::name_of(autodiff::cpu_isa()) << ", in use "
                                   << autodiff::name_of(autodiff::isa()));

    each_level{}([](Isa level) { BOOST_TEST((autodiff::isa() == level)); });
    for (Isa level : {Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
        if (level <= autodiff::max_isa()) continue;
        const std::string message = isa_error_of([&] { autodiff::set_isa(level); });
        BOOST_TEST(contains(message, autodiff::name_of(level)), message);
        BOOST_TEST(contains(message, autodiff::name_of(autodiff::max_isa())), message);
        BOOST_TEST((autodiff::isa() == autodiff::max_isa()), "a refused level must not change the one in use");
    }
    BOOST_TEST(contains(isa_error_of([] { autodiff::set_isa(static_cast<Isa>(9)); }), "not a level"));
}

// The environment variable, read through the same function the library reads it with.
BOOST_AUTO_TEST_CASE(mixprec_isa_values) {
    using autodiff::detail::parse_isa_request;
    for (const char* unset : {static_cast<const char*>(nullptr), "", "native"}) {
        const auto r = parse_isa_request(unset, Isa::avx512);
        BOOST_TEST((r.cap == Isa::avx512 && !r.named));
    }
    for (Isa level : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
        const auto r = parse_isa_request(std::string(autodiff::name_of(level)).c_str(), Isa::avx512_bf16);
        BOOST_TEST((r.cap == level && r.named));
    }
    const std::string above = isa_error_of([] { parse_isa_request("avx512_bf16", Isa::avx2); });
    BOOST_TEST(contains(above, "MIXPREC_ISA=avx512_bf16 is above what this CPU has: its best level is avx2"), above);
    for (const char* bad : {"AVX2", "avx512bf16", "sse4", " avx2"}) {
        const std::string message = isa_error_of([&] { parse_isa_request(bad, Isa::avx512_bf16); });
        BOOST_TEST(contains(message, std::string("\"") + bad + "\" names no instruction-set level"), message);
        BOOST_TEST(contains(message, "portable, avx2, avx512, avx512_bf16, native"), message);
    }
}

// A level named by MIXPREC_ISA caps oneDNN too, so that bfloat16 products change route with it.
BOOST_AUTO_TEST_CASE(onednn_is_capped_to_the_named_level) {
    const auto requested = autodiff::detail::requested_isa();
    const unsigned effective = autodiff::detail::onednn_effective_isa();
    BOOST_TEST_MESSAGE("oneDNN's effective ISA: 0x" << std::hex << effective);
    if (!requested) return; // native: oneDNN takes what the CPU has (AMX where present)
    const std::map<Isa, unsigned> cap{{Isa::portable, dnnl_cpu_isa_sse41},
                                      {Isa::avx2, dnnl_cpu_isa_avx2},
                                      {Isa::avx512, dnnl_cpu_isa_avx512_core},
                                      {Isa::avx512_bf16, dnnl_cpu_isa_avx512_core_bf16}};
    BOOST_TEST(effective == cap.at(*requested));
}

// tanh, sigmoid and GELU (forward and backward) on every float16 value and a million random float32
// bit patterns (NaN, infinities and subnormals among them), in float32 and float16: the same bits at
// every level. The odd length leaves a tail after every vector width.
BOOST_AUTO_TEST_CASE(elementwise_kernels_give_the_same_bits_at_every_level) {
    std::vector<float> v;
    for (std::uint32_t h = 0; h < 65536; ++h) v.push_back(float(autodiff::float16::from_bits(std::uint16_t(h))));
    std::mt19937 gen(5);
    for (int i = 0; i < 1'000'003; ++i) v.push_back(std::bit_cast<float>(std::uint32_t(gen())));
    for (Dtype dtype : {Dtype::float32, Dtype::float16}) {
        const Tensor x = Tensor::from_floats(Shape{v.size()}, v, dtype);
        const auto run = [&] {
            std::vector<std::vector<unsigned char>> out{bytes_of(autodiff::kernels::tanh(x)),
                                                        bytes_of(autodiff::kernels::sigmoid(x))};
            autodiff::Variable var(x.to(Dtype::float32), "x");
            var.set_working_dtype(dtype);
            autodiff::GradientTape tape;
            const Tensor y = autodiff::gelu(var.read());
            out.push_back(bytes_of(y));
            out.push_back(bytes_of(tape.gradient(y, std::vector{var})[0]));
            return out;
        };
        autodiff::set_isa(Isa::portable);
        const auto reference = run();
        each_level{}([&](Isa) {
            const auto got = run();
            for (std::size_t k = 0; k < got.size(); ++k)
                BOOST_TEST((got[k] == reference[k]), "output " << k << " (tanh, sigmoid, gelu, gelu') in " << dtype);
        });
    }
}

// A first layer on oneDNN's route (one channel, 3 × 3) takes conv_first_layer.hpp's pass from the avx2 level
// up, 8 lanes at avx2 and 16 above: conv2d's output and conv2d_max_pool's pooled output have the same bits at
// every one of those levels, in every dtype the pass pools to (bfloat16 below avx512_bf16, where its own
// route takes it), with and without the ReLU, on rows that leave tails after both widths, with NaNs and
// infinities among the inputs.
BOOST_AUTO_TEST_CASE(first_layer_pass_gives_the_same_bits_from_avx2_up) {
    const Shape xs{3, 1, 11, 41}, ws{6, 1, 3, 3};
    std::mt19937 gen(17);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> xv(xs.elements()), wv(ws.elements()), bv(ws[0]);
    for (float& v : xv) v = u(gen);
    for (float& v : wv) v = u(gen);
    for (float& v : bv) v = u(gen);
    for (std::size_t i = 7; i < xv.size(); i += 89) xv[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16})
        for (bool relu : {false, true}) {
            const Tensor x = Tensor::from_floats(xs, xv, dtype), w = Tensor::from_floats(ws, wv, dtype);
            const Tensor b = Tensor::from_floats(Shape{ws[0]}, bv, dtype);
            const autodiff::Conv2dOptions o{.backend = autodiff::ConvBackend::onednn, .relu = relu};
            const auto run = [&] {
                return std::vector{bytes_of(autodiff::conv2d(x, w, b, o)),
                                   bytes_of(autodiff::conv2d_max_pool(x, w, b, o))};
            };
            std::optional<std::vector<std::vector<unsigned char>>> reference;
            each_level{}([&](Isa level) {
                if (level < Isa::avx2 || (dtype == Dtype::bfloat16 && level >= Isa::avx512_bf16)) return;
                const auto got = run();
                if (!reference) reference = got;
                for (std::size_t k = 0; k < got.size(); ++k)
                    BOOST_TEST((got[k] == (*reference)[k]), (k == 0 ? "conv2d" : "conv2d_max_pool")
                                                                << " in " << dtype << (relu ? ", relu" : ""));
            });
        }
}

// SGD (plain, momentum, Nesterov with weight decay), Adam, AMSGrad and AdamW, ten steps on variables
// whose sizes leave tails after every vector width: the same masters at every level.
BOOST_AUTO_TEST_CASE(optimizers_give_the_same_bits_at_every_level) {
    using Make = std::function<std::unique_ptr<optim::Optimizer>()>;
    const std::vector<std::pair<const char*, Make>> optimizers{
        {"sgd", [] { return std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f}); }},
        {"momentum",
         [] { return std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f, .momentum = 0.9f}); }},
        {"nesterov",
         [] {
             return std::make_unique<optim::SGD>(
                 optim::SGD::Options{.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true, .weight_decay = 1e-2f});
         }},
        {"adam", [] { return std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}); }},
        {"amsgrad",
         [] { return std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f, .amsgrad = true}); }},
        {"adamw", [] { return std::make_unique<optim::AdamW>(optim::AdamW::Options{.learning_rate = 1e-2f}); }},
    };
    const auto train = [](const Make& make) {
        std::mt19937 gen(3);
        std::normal_distribution<float> d(0.0f, 1.0f);
        std::vector<autodiff::Variable> vars;
        for (std::size_t n : {1u, 17u, 1003u}) {
            std::vector<float> w(n);
            for (auto& x : w) x = d(gen);
            vars.emplace_back(Tensor::from_floats(Shape{n}, w), "w");
        }
        auto opt = make();
        for (int step = 0; step < 10; ++step) {
            std::vector<Tensor> grads;
            for (const auto& var : vars) {
                std::vector<float> g(var.value().size());
                for (auto& x : g) x = d(gen);
                grads.push_back(Tensor::from_floats(var.value().shape(), g));
            }
            opt->apply(grads, vars);
        }
        std::vector<std::vector<unsigned char>> masters;
        for (const auto& var : vars) masters.push_back(bytes_of(var.value()));
        return masters;
    };
    for (const auto& [name, make] : optimizers) {
        autodiff::set_isa(Isa::portable);
        const auto reference = train(make);
        each_level{}([&](Isa) { BOOST_TEST((train(make) == reference), name); });
    }
}

// Adam, AMSGrad, AdamW and SGD (plain, momentum, Nesterov) on weights whose gradients put the state near
// underflow (the m, v or momentum buffer of a weight whose gradient is zero, subnormal or tiny; a few
// weights tiny themselves), mixed lane by lane with ordinary ones and switching between the two from step
// to step: from avx2 up such lanes are computed in double (optim/detail/near_underflow_avx2.hpp and
// near_underflow_avx512.hpp) or in float, as optim::near_underflow() says (both ways here, whichever this
// CPU's automatic takes), and the weights and every slot must keep the bits of the float arithmetic of the
// portable level. 70,001 elements: two threads' pieces and a tail.
BOOST_AUTO_TEST_CASE(optimizers_keep_their_bits_when_state_nears_underflow) {
    using Make = std::function<std::unique_ptr<optim::Optimizer>()>;
    const std::vector<std::pair<const char*, Make>> optimizers{
        {"adam", [] { return std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3f}); }},
        {"amsgrad",
         [] { return std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3f, .amsgrad = true}); }},
        {"adamw",
         [] {
             return std::make_unique<optim::AdamW>(optim::AdamW::Options{.learning_rate = 1e-3f, .weight_decay = 0.5f});
         }},
        {"sgd",
         [] {
             return std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f, .weight_decay = 1e-2f});
         }},
        {"momentum",
         [] { return std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = 0.1f, .momentum = 0.9f}); }},
        {"nesterov",
         [] {
             return std::make_unique<optim::SGD>(
                 optim::SGD::Options{.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true});
         }},
    };
    // A gradient of each kind: 0, subnormal, below 2^-100, below 2^-60 (its square underflows), ordinary.
    const auto gradient = [](unsigned kind, std::mt19937& gen) {
        std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
        const float sign = gen() % 2 ? -1.0f : 1.0f, x = sign * mantissa(gen);
        switch (kind % 5) {
        case 0:
            return 0.0f;
        case 1:
            return std::ldexp(x, -140);
        case 2:
            return std::ldexp(x, -110);
        case 3:
            return std::ldexp(x, -70);
        default:
            return 0.01f * x;
        }
    };
    const auto train = [&](const Make& make) {
        constexpr std::size_t n = 70001;
        std::mt19937 gen(5);
        std::vector<float> w(n);
        std::vector<unsigned> kind(n);
        for (std::size_t i = 0; i < n; ++i) {
            w[i] = i % 97 == 0 ? std::ldexp(1.5f, -130 + int(i % 40)) : std::ldexp(float(gen() % 1000) - 500.0f, -9);
            kind[i] = unsigned(gen() % 7); // 5 and 6: a new kind every step
        }
        std::vector<autodiff::Variable> vars;
        vars.emplace_back(Tensor::from_floats(Shape{n}, w), "w");
        auto opt = make();
        for (int step = 0; step < 12; ++step) {
            std::vector<float> g(n);
            for (std::size_t i = 0; i < n; ++i) g[i] = gradient(kind[i] < 5 ? kind[i] : unsigned(gen()), gen);
            opt->apply({Tensor::from_floats(Shape{n}, g)}, vars);
        }
        std::vector<std::vector<float>> state{vars[0].value().to_floats()};
        for (const auto& slot : opt->slots()) state.emplace_back(slot.values.begin(), slot.values.end());
        return state;
    };
    const auto same_bits = [](const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
        if (a.size() != b.size()) return false;
        for (std::size_t k = 0; k < a.size(); ++k)
            if (a[k].size() != b[k].size() || std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) != 0)
                return false;
        return true;
    };
    for (const auto& [name, make] : optimizers) {
        autodiff::set_isa(Isa::portable);
        const auto reference = train(make);
        // The state does reach the slow band: subnormal weights, and thousands of subnormal slot values.
        for (std::size_t k = 0; k < reference.size(); ++k) {
            const auto subnormal = std::count_if(reference[k].begin(), reference[k].end(),
                                                 [](float x) { return std::fpclassify(x) == FP_SUBNORMAL; });
            BOOST_TEST_CONTEXT(name << " array " << k) { BOOST_TEST(subnormal > (k == 0 ? 10 : 1000)); }
        }
        for (optim::NearUnderflow way : {optim::NearUnderflow::in_double, optim::NearUnderflow::in_float}) {
            optim::set_near_underflow(way);
            BOOST_TEST_CONTEXT(optim::name_of(way)) {
                each_level{}([&](Isa) { BOOST_TEST(same_bits(train(make), reference), name); });
            }
        }
        optim::set_near_underflow(optim::NearUnderflow::automatic);
    }
}

// The way lanes near underflow are taken: its names both ways, a clear error for any other, and automatic
// resolved by the CPU's measured speed on subnormal numbers (the same answer every time it is asked).
BOOST_AUTO_TEST_CASE(near_underflow_choices) {
    using optim::NearUnderflow;
    for (NearUnderflow way : {NearUnderflow::automatic, NearUnderflow::in_double, NearUnderflow::in_float})
        BOOST_TEST((optim::near_underflow_named(optim::name_of(way)) == way));
    BOOST_CHECK_EXCEPTION(optim::near_underflow_named("fast"), std::invalid_argument, [](const auto& e) {
        return std::string(e.what()).find("'fast' (the choices: automatic, double, float)") != std::string::npos;
    });
    const bool slow = optim::subnormal_floats_are_slow();
    BOOST_TEST(optim::subnormal_floats_are_slow() == slow);
    optim::set_near_underflow(NearUnderflow::in_double);
    BOOST_TEST(optim::near_underflow_in_double());
    optim::set_near_underflow(NearUnderflow::in_float);
    BOOST_TEST(!optim::near_underflow_in_double());
    optim::set_near_underflow(NearUnderflow::automatic);
    BOOST_TEST(optim::near_underflow_in_double() == slow);
    BOOST_TEST_MESSAGE("float multiplies yielding subnormal numbers are " << (slow ? "slow" : "fast")
                                                                          << " on this CPU");
}

namespace {

/// The weights digest and the final loss scale after six steps of fit on 64 random 28x28 images (four
/// batches an epoch), the scale growing every two finite steps and an inf injected into the gradients of
/// step 3: 65536 after step 2, 32768 after the skipped step 3, 65536 again after step 5.
std::pair<std::string, float> short_run(const char* model_name, const char* precision) {
    amp::set_global_policy(precision); // the layers take it when they are built
    models::Sequential model = models::make_model(model_name);
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
    std::vector<float> x(64 * 28 * 28);
    for (auto& p : x) p = pixel(gen);
    std::vector<std::int32_t> y(64);
    for (auto& label : y) label = std::int32_t(gen() % 10);
    const models::TensorDataset data(Tensor::from_floats(Shape{64, 1, 28, 28}, x), y);
    model.build(data.example_shape(), 1);
    amp::LossScaleOptions scaling;
    scaling.growth_interval = 2;
    amp::LossScaleOptimizer opt(std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3f}), scaling);
    models::TrainingState state;
    models::FitOptions fit{.epochs = 2, .batch_size = 16, .seed = 1, .max_steps = 6};
    fit.gradient_hook = [](std::int64_t step, std::vector<Tensor>& grads) {
        if (step == 3) grads[0] = autodiff::kernels::scale(grads[0], INFINITY);
    };
    models::fit(model, opt, data, state, fit);
    amp::set_global_policy("float32");
    return {models::weights_digest(model.variables()), opt.scale()};
}

} // namespace

// Whole training runs of the built-in models (dense, convolution, pooling, attention, layer norm, GELU,
// softmax, losses, the unscale pass, the loss-scale rule, Adam): the same weights among the levels on each
// side of avx512 in float32, mixed_float16 and mixed_cbfloat16. Below avx512, products take OpenBLAS's sgemm;
// from avx512 up, products of one matrix take oneDNN's sgemm (Float32Gemm::automatic) and convolutions
// oneDNN's primitives (ops_conv.hpp), whose float32 kernels are the same at every level there. Below avx512
// the cnn's convolutions take oneDNN's avx2 primitives at avx2 and im2col on OpenBLAS at portable, so its
// runs at avx2 form a group of their own. bfloat16 products run on oneDNN's bfloat16 matmul from avx512_bf16
// up, so mixed_bfloat16 runs there form a third group.
BOOST_AUTO_TEST_CASE(training_gives_the_same_weights_at_every_level) {
    for (const char* model : {"mlp", "cnn", "vit"})
        for (const char* precision : {"float32", "mixed_float16", "mixed_cbfloat16", "mixed_bfloat16"}) {
            const bool bf16 = std::string_view(precision) == "mixed_bfloat16";
            // the levels that give one result: the first of each group runs the reference
            const auto group = [&](Isa level) {
                if (bf16 && level >= Isa::avx512_bf16) return 2;
                if (level >= Isa::avx512) return 1;
                return std::string_view(model) == "cnn" && level == Isa::avx2 ? 3 : 0;
            };
            std::map<int, std::pair<std::string, float>> reference;
            each_level{}([&](Isa level) {
                const auto run = short_run(model, precision);
                BOOST_TEST(run.second == 65536.0f);
                const auto [first, made] = reference.emplace(group(level), run);
                if (made)
                    BOOST_TEST_MESSAGE(model << " " << precision << " from " << autodiff::name_of(level) << ": digest "
                                             << run.first);
                BOOST_TEST((run == first->second), model << " " << precision);
            });
        }
}
