#define BOOST_TEST_MODULE layers
// Tests of the models layers (Dense, Conv2D, pooling, LayerNorm, Embedding, Flatten, Activation, Rescaling, Dropout),
// the initializers, Sequential (naming, summary, seeds), the mlp and cnn models and TensorDataset.
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <mixprec/models/data/dataset.hpp>
#include <mixprec/models/layers/embedding.hpp>
#include <mixprec/models/layers/initializers.hpp>
#include <mixprec/models/layers/layers_conv.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/layers/layers_norm.hpp>
#include <mixprec/models/layers/pooling.hpp>
#include <mixprec/models/training/sequential.hpp>
#include <mixprec/models/training/zoo.hpp>

#include "error_bounds.hpp"
#include "op_checks.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

using namespace mixprec;
using namespace mixprec::autodiff;
using namespace mixprec::models;
using op_checks::throws_with;

namespace {

Tensor random(const Shape& shape, float lo, float hi, unsigned seed) { return op_checks::uniform(shape, lo, hi, seed); }

/// Builds a standalone layer for examples of `example` (a layer outside a model has no name).
template <class L>
L& build(L& layer, const Shape& example, std::uint64_t seed = 1) {
    Rng rng(seed);
    layer.build(example, rng);
    return layer;
}

/// Sets the global policy for a scope and restores the previous one.
struct PolicyScope {
    amp::Policy saved = amp::global_policy();
    explicit PolicyScope(std::string_view name) { amp::set_global_policy(name); }
    ~PolicyScope() { amp::set_global_policy(saved); }
};

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

/// Checks the gradient of Σ w·run() with respect to each variable (read inside run) against central
/// finite differences on its float32 master, with gradcheck's step and tolerances.
void check_variable_gradients(const std::string& what, const std::function<Tensor()>& run,
                              std::vector<Variable> variables) {
    std::vector<Tensor> grads;
    Tensor w;
    {
        GradientTape tape;
        const Tensor y = run();
        w = random(y.shape(), 0.5f, 1.5f, 99);
        grads = tape.gradient(mul(y, w), variables);
    }
    const auto weighted = [&] {
        const std::vector<float> y = run().to_floats(), ws = w.to_floats();
        double s = 0;
        for (std::size_t i = 0; i < y.size(); ++i) s += double(y[i]) * ws[i];
        return s;
    };
    for (std::size_t k = 0; k < variables.size(); ++k) {
        Variable& v = variables[k];
        const std::vector<float> g = grads[k].to_floats();
        double worst = 0;
        std::string where;
        for (std::size_t i = 0; i < v.shape().elements(); ++i) {
            float* p = v.master_data().data() + i;
            const float x0 = *p, h = 1e-2f * std::max(1.0f, std::fabs(x0));
            *p = x0 + h;
            const float up = *p;
            v.mark_changed();
            const double plus = weighted();
            *p = x0 - h;
            const float down = *p;
            v.mark_changed();
            const double minus = weighted();
            *p = x0;
            v.mark_changed();
            const double numeric = (plus - minus) / (double(up) - double(down));
            const double error = std::fabs(g[i] - numeric) - 1e-2 * std::fabs(numeric) - 1e-3;
            if (error > worst) {
                worst = error;
                std::ostringstream s;
                s << " element " << i << ": tape " << g[i] << ", finite differences " << numeric;
                where = s.str();
            }
        }
        BOOST_TEST(worst <= 0.0, what << " " << v.name() << where);
    }
}

/// The gradient check through a built layer: its input by gradcheck, its variables as above.
void check_layer_gradients(
    const std::string& what, Layer& layer, const Tensor& x,
    const std::function<CallContext()>& context = [] { return CallContext{}; }) {
    const GradcheckResult r = gradcheck([&](const auto& in) { return layer(in[0], context()); }, {x});
    BOOST_TEST(r.passed, what << " input: " << r.worst);
    if (!layer.variables().empty())
        check_variable_gradients(
            what, [&] { return layer(x, context()); }, layer.variables());
}

/// Cross-correlation as the layers define it, by direct loops: x (N, C, H, W), w (O, C, kh, kw),
/// zeros `before` ahead of each spatial axis (and wherever the window runs past the end).
std::vector<double> conv_reference(const Tensor& x, const Tensor& w, const Tensor& b, Size2 stride, Size2 before,
                                   std::size_t ho, std::size_t wo) {
    const std::size_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], wi = x.shape()[3];
    const std::size_t o = w.shape()[0], kh = w.shape()[2], kw = w.shape()[3];
    std::vector<double> y;
    for (std::size_t ni = 0; ni < n; ++ni)
        for (std::size_t oi = 0; oi < o; ++oi)
            for (std::size_t i = 0; i < ho; ++i)
                for (std::size_t j = 0; j < wo; ++j) {
                    double s = b.flat(oi);
                    for (std::size_t ci = 0; ci < c; ++ci)
                        for (std::size_t p = 0; p < kh; ++p)
                            for (std::size_t q = 0; q < kw; ++q) {
                                const long r = long(i * stride[0] + p) - long(before[0]);
                                const long col = long(j * stride[1] + q) - long(before[1]);
                                if (r < 0 || col < 0 || r >= long(h) || col >= long(wi)) continue;
                                s += double(w.at({oi, ci, p, q})) * x.at({ni, ci, std::size_t(r), std::size_t(col)});
                            }
                    y.push_back(s);
                }
    return y;
}

/// Checks float32 sums of k terms against float64 references within the bound of error_bounds.hpp; an
/// activation f applied after the sum (Lipschitz constant 1: identity, tanh) passes the sum's error on and
/// adds its own: `f_ulps` units in the last place (2 for tanh, vector_math_accuracy).
void check_sums(const Tensor& y, const std::vector<double>& exact, const std::vector<double>& magnitude, std::size_t k,
                const std::string& what, double (*f)(double) = nullptr, double f_ulps = 0) {
    BOOST_TEST_REQUIRE(y.size() == exact.size(), what);
    std::size_t far = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
        const double want = f ? f(exact[i]) : exact[i];
        const double bound = error_bounds::rounded_sum_error(Dtype::float32, k, exact[i], magnitude[i]) +
                             f_ulps * error_bounds::ulp(Dtype::float32, std::fabs(want));
        if (std::fabs(y.flat(i) - want) > bound && ++far <= 3)
            BOOST_TEST_MESSAGE(what << " element " << i << ": " << y.flat(i) << ", reference " << want);
    }
    BOOST_TEST(far == 0u, what << ": " << far << " elements beyond the bound");
}

void check_close(const Tensor& y, const std::vector<float>& expected, float tol, const std::string& what) {
    BOOST_TEST_REQUIRE(y.size() == expected.size(), what);
    float worst = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
        worst = std::max(worst, std::fabs(y.flat(i) - expected[i]) / std::max(1.0f, std::fabs(expected[i])));
    BOOST_TEST(worst <= tol, what << ": worst relative error " << worst);
}

} // namespace

// ---- initializers ----

BOOST_AUTO_TEST_CASE(initializers_follow_their_distributions) {
    Rng rng(5);
    const Tensor g = glorot_uniform(Shape{200, 300}, 200, 300, rng);
    const double limit = std::sqrt(6.0 / 500.0);
    double mean = 0, sq = 0;
    std::size_t outside = 0;
    for (float v : g.to_floats()) {
        outside += !(v >= -limit && v < limit);
        mean += v / 60000.0;
        sq += double(v) * v / 60000.0;
    }
    BOOST_TEST(outside == 0u);
    BOOST_TEST(std::fabs(mean) < 0.01 * limit);
    BOOST_TEST(sq == limit * limit / 3, boost::test_tools::tolerance(0.02)); // variance of U(-l, l)

    // Keras's he_normal: values truncated at 2σ' (σ' = σ / 0.8796) whose standard deviation is σ = √(2/fan_in).
    const Tensor h = he_normal(Shape{100, 200}, 50, rng);
    const double sigma = std::sqrt(2.0 / 50.0), cut = 2 * sigma / 0.87962566103423978;
    sq = 0;
    float largest = 0;
    for (float v : h.to_floats()) {
        sq += double(v) * v / 20000.0;
        largest = std::max(largest, std::fabs(v));
    }
    BOOST_TEST(largest <= cut * (1 + 1e-6));
    BOOST_TEST(largest > 0.9 * cut); // the tails are used, not cut short
    BOOST_TEST(std::sqrt(sq) == sigma, boost::test_tools::tolerance(0.03));

    const Tensor u = random_uniform(Shape{1000}, -0.05f, 0.05f, rng);
    for (float v : u.to_floats()) outside += !(v >= -0.05f && v < 0.05f);
    BOOST_TEST(outside == 0u);
    BOOST_TEST(zeros(Shape{2, 3}).to_floats() == std::vector<float>(6, 0.0f));
    BOOST_TEST(ones(Shape{4}).to_floats() == std::vector<float>(4, 1.0f));
    BOOST_TEST((g.dtype() == Dtype::float32 && h.dtype() == Dtype::float32 && u.dtype() == Dtype::float32));
}

BOOST_AUTO_TEST_CASE(initializers_are_seeded) {
    Rng a(11), b(11), c(12);
    const Tensor ga = glorot_uniform(Shape{8, 8}, 8, 8, a), gb = glorot_uniform(Shape{8, 8}, 8, 8, b);
    BOOST_TEST(same_bits(ga, gb));
    BOOST_TEST(!same_bits(ga, glorot_uniform(Shape{8, 8}, 8, 8, c)));
    BOOST_TEST(same_bits(he_normal(Shape{50}, 8, a), he_normal(Shape{50}, 8, b)));
    BOOST_TEST((a == b)); // each drew the same amount from its generator
    BOOST_TEST(!same_bits(he_normal(Shape{50}, 8, a), he_normal(Shape{50}, 8, c)));
}

BOOST_AUTO_TEST_CASE(initializer_errors) {
    Rng rng(1);
    BOOST_TEST((throws_with<std::invalid_argument>([&] { glorot_uniform(Shape{0}, 0, 0, rng); }, {"fan_in"})));
    BOOST_TEST((throws_with<std::invalid_argument>([&] { he_normal(Shape{2}, 0, rng); }, {"fan_in"})));
    BOOST_TEST((throws_with<std::invalid_argument>([&] { random_uniform(Shape{2}, 1.0f, 1.0f, rng); }, {"low"})));
    BOOST_TEST(
        (throws_with<std::invalid_argument>([&] { random_uniform(Shape{2}, 0.0f, INFINITY, rng); }, {"high = inf"})));
}

// ---- Dense ----

BOOST_AUTO_TEST_CASE(dense_computes_x_w_plus_b) {
    Dense dense(3, "tanh");
    build(dense, Shape{4});
    BOOST_TEST(dense.output_shape() == (Shape{3}));
    std::vector<Variable> vars = dense.variables();
    BOOST_TEST_REQUIRE(vars.size() == 2u);
    BOOST_TEST(vars[0].shape() == (Shape{4, 3}));
    BOOST_TEST(vars[1].shape() == (Shape{3}));
    BOOST_TEST(vars[1].value().to_floats() == std::vector<float>(3, 0.0f)); // bias starts at zeros
    const double limit = std::sqrt(6.0 / 7.0);
    for (float v : vars[0].value().to_floats()) BOOST_TEST((std::fabs(v) <= limit && v != 0.0f));

    const Tensor w = random(Shape{4, 3}, 0.1f, 1.0f, 1), b = random(Shape{3}, 0.1f, 1.0f, 2);
    vars[0].assign(w);
    vars[1].assign(b);
    const Tensor x = random(Shape{2, 4}, 0.1f, 1.0f, 3);
    const Tensor y = dense(x);
    BOOST_TEST(y.shape() == (Shape{2, 3}));
    std::vector<double> sums, sizes; // x w + b, and Σ|terms|
    for (std::size_t n = 0; n < 2; ++n)
        for (std::size_t j = 0; j < 3; ++j) {
            double s = b.flat(j), size = std::fabs(b.flat(j));
            for (std::size_t i = 0; i < 4; ++i) {
                s += double(x.at({n, i})) * w.at({i, j});
                size += std::fabs(double(x.at({n, i})) * w.at({i, j}));
            }
            sums.push_back(s), sizes.push_back(size);
        }
    check_sums(
        y, sums, sizes, 5, "Dense(3, tanh)", [](double v) { return std::tanh(v); }, 2);
}

// Examples of rank 3: the product applies to the last axis of every position, which keeps its place.
BOOST_AUTO_TEST_CASE(dense_keeps_leading_axes) {
    Dense dense(5, "", false);
    build(dense, Shape{2, 3, 4});
    BOOST_TEST(dense.output_shape() == (Shape{2, 3, 5}));
    BOOST_TEST_REQUIRE(dense.variables().size() == 1u);
    const Tensor x = random(Shape{2, 2, 3, 4}, 0.1f, 1.0f, 4);
    const Tensor y = dense(x);
    BOOST_TEST(y.shape() == (Shape{2, 2, 3, 5}));
    const Tensor rows = dense.variables()[0].read();
    const Tensor flat = matmul(reshape(x, Shape{12, 4}), rows);
    BOOST_TEST(same_bits(reshape(y, Shape{12, 5}), flat));
}

// Under mixed_float8, a model's middle Dense multiplies in FP8 when a training step hands it scales; the
// first and last stay in bfloat16 unless set_fp8(true); without scales every layer runs in bfloat16.
BOOST_AUTO_TEST_CASE(dense_multiplies_in_fp8_under_mixed_float8) {
    amp::Policy fp8("mixed_float8");
    BOOST_TEST(fp8.fp8_products());
    BOOST_TEST((fp8.compute_dtype() == Dtype::bfloat16));
    BOOST_TEST(!fp8.needs_loss_scaling());
    const auto make = [&] {
        Sequential model{Dense(8, "relu"), Dense(8, "relu"), Dense(3)};
        for (const auto& l : model.layers()) l->set_policy(fp8);
        model.build(Shape{5}, 7);
        return model;
    };
    const Tensor x = random(Shape{4, 5}, -1.0f, 1.0f, 8);
    Sequential model = make();
    amp::Fp8Scaling scaling({.recipe = amp::Fp8Recipe::delayed});
    const Tensor y = model(x, {.fp8 = &scaling});
    BOOST_TEST(scaling.tensors().size() == 2u); // dense_1's input and kernel: the edges stay in bfloat16
    BOOST_TEST(scaling.tensors().count("dense_1/input") == 1u);
    BOOST_TEST(scaling.tensors().count("dense_1/kernel") == 1u);
    // With scale 1 (the delayed recipe's first step) the middle product is dense_fp8's.
    auto& middle = dynamic_cast<Dense&>(model.layer("dense_1"));
    auto& first = dynamic_cast<Dense&>(model.layer("dense"));
    const Tensor h = first(cast(x, Dtype::bfloat16));
    amp::Fp8Scaling fresh;
    const std::vector<Variable> v = middle.variables();
    const Tensor want = relu(dense_fp8(h, v[0].read(), v[1].read(), fresh.dense_casts("dense_1")));
    BOOST_TEST(same_bits(middle(h, {.fp8 = &scaling}),
                         relu(dense_fp8(h, v[0].read(), v[1].read(), scaling.dense_casts("dense_1")))));
    BOOST_TEST(same_bits(middle(h, {.fp8 = &fresh}), want));
    BOOST_TEST(!same_bits(middle(h), want)); // without scales: bfloat16
    first.set_fp8(true);
    model(x, {.fp8 = &scaling});
    BOOST_TEST(scaling.tensors().count("dense/input") == 1u);
}

// Under mixed_float8 a Conv2D takes part in the edge rule as a Dense does: the first and last layers
// with products stay in bfloat16, and the middle convolution runs conv2d_fp8.
BOOST_AUTO_TEST_CASE(conv2d_convolves_in_fp8_under_mixed_float8) {
    amp::Policy fp8("mixed_float8");
    Sequential model{Conv2D(3, {3, 3}, "relu"), Conv2D(4, {3, 3}, "relu"), Flatten(), Dense(5, "relu"), Dense(2)};
    for (const auto& l : model.layers()) l->set_policy(fp8);
    model.build(Shape{2, 8, 8}, 7);
    const Tensor x = random(Shape{3, 2, 8, 8}, -1.0f, 1.0f, 8);
    amp::Fp8Scaling scaling({.recipe = amp::Fp8Recipe::current});
    model(x, {.fp8 = &scaling});
    amp::Fp8Scaling delayed;
    model(x, {.fp8 = &delayed});
    BOOST_TEST(delayed.tensors().size() == 4u); // conv2d_1 and dense: input and kernel each
    BOOST_TEST(delayed.tensors().count("conv2d_1/kernel") == 1u);
    BOOST_TEST(delayed.tensors().count("dense/kernel") == 1u);
    auto& first = dynamic_cast<Conv2D&>(model.layer("conv2d"));
    auto& middle = dynamic_cast<Conv2D&>(model.layer("conv2d_1"));
    BOOST_TEST(!first.fp8());
    BOOST_TEST(middle.fp8());
    const Tensor h = first(cast(x, Dtype::bfloat16));
    const std::vector<Variable> v = middle.variables();
    const Tensor want = relu(conv2d_fp8(h, v[0].read(), v[1].read(), scaling.dense_casts("conv2d_1")));
    BOOST_TEST(same_bits(middle(h, {.fp8 = &scaling}), want));
    BOOST_TEST(!same_bits(middle(h), want)); // without scales: bfloat16
}

// Under mixed_mxfp8, a model's middle Dense multiplies MXFP8 operands in training and evaluation alike (no
// scales to hand over); the first and last stay in bfloat16, and set_fp8(false) exempts any layer.
BOOST_AUTO_TEST_CASE(dense_multiplies_in_mx_under_mixed_mxfp8) {
    amp::Policy mx("mixed_mxfp8");
    BOOST_TEST(mx.mx_products());
    BOOST_TEST(!mx.fp8_products());
    BOOST_TEST((mx.compute_dtype() == Dtype::bfloat16));
    BOOST_TEST(!mx.needs_loss_scaling());
    Sequential model{Dense(40, "relu"), Dense(8, "relu"), Dense(3)};
    for (const auto& l : model.layers()) l->set_policy(mx);
    model.build(Shape{5}, 7);
    auto& first = dynamic_cast<Dense&>(model.layer("dense"));
    auto& middle = dynamic_cast<Dense&>(model.layer("dense_1"));
    const Tensor x = cast(random(Shape{4, 5}, -1.0f, 1.0f, 8), Dtype::bfloat16);
    const std::vector<Variable> f = first.variables(), v = middle.variables();
    const Tensor h = first(x);
    BOOST_TEST(same_bits(h, relu(dense(x, f[0].read(), f[1].read()))));
    const Tensor want = relu(dense_mxfp8(h, v[0].read(), v[1].read()));
    BOOST_TEST(same_bits(middle(h), want));
    BOOST_TEST(!same_bits(relu(dense(h, v[0].read(), v[1].read())), want));
    middle.set_fp8(false);
    BOOST_TEST(same_bits(middle(h), relu(dense(h, v[0].read(), v[1].read()))));
}

// ---- Conv2D and pooling ----

BOOST_AUTO_TEST_CASE(conv2d_matches_direct_loops) {
    struct Case {
        Size2 kernel, stride;
        std::string padding;
        Shape example, output;
        Size2 before; // zeros ahead of rows and columns ("same")
    };
    const std::vector<Case> cases{
        {{3, 3}, {1, 1}, "valid", Shape{2, 6, 5}, Shape{3, 4, 3}, {0, 0}},
        {{3, 2}, {2, 2}, "valid", Shape{2, 7, 6}, Shape{3, 3, 3}, {0, 0}},
        {{3, 3}, {1, 1}, "same", Shape{2, 5, 4}, Shape{3, 5, 4}, {1, 1}},
        // ⌈6/2⌉ = 3 outputs need (3-1)·2 + 3 = 7 rows: one zero, after; ⌈5/2⌉ = 3 need 7 columns: 1 + 1.
        {{3, 3}, {2, 2}, "same", Shape{2, 6, 5}, Shape{3, 3, 3}, {0, 1}},
        // An even kernel: total padding 1, after.
        {{2, 2}, {1, 1}, "same", Shape{2, 4, 4}, Shape{3, 4, 4}, {0, 0}},
    };
    for (const Case& c : cases) {
        Conv2D conv(3, c.kernel, "", c.stride, c.padding);
        build(conv, c.example);
        const std::string what = "Conv2D " + conv.config() + " on " + c.example.to_string();
        BOOST_TEST(conv.output_shape() == c.output, what);
        std::vector<Variable> vars = conv.variables();
        BOOST_TEST_REQUIRE(vars.size() == 2u);
        BOOST_TEST(vars[0].shape() == (Shape{3, 2, c.kernel[0], c.kernel[1]}));
        vars[1].assign(random(Shape{3}, 0.1f, 1.0f, 5));
        const Tensor x = random(Shape{2, c.example[0], c.example[1], c.example[2]}, 0.1f, 1.0f, 6);
        const Tensor y = conv(x);
        BOOST_TEST(y.shape() == (Shape{2, c.output[0], c.output[1], c.output[2]}), what);
        const Tensor w = vars[0].value(), b = vars[1].value();
        const auto reference = [&](const Tensor& xs, const Tensor& ws, const Tensor& bs) {
            return conv_reference(xs, ws, bs, c.stride, c.before, c.output[1], c.output[2]);
        };
        check_sums(y, reference(x, w, b), reference(kernels::abs(x), kernels::abs(w), kernels::abs(b)),
                   c.example[0] * c.kernel[0] * c.kernel[1] + 1, what);
    }
}

// Keras's glorot fans for a convolution kernel: fan_in = C·kh·kw, fan_out = filters·kh·kw.
// Sequential runs a Conv2D (with a ReLU or none, "valid" or "same") and the 2×2 MaxPool2D after it as one
// conv2d_max_pool: the model's output and every gradient have the bits of the layers called one by one.
// The input is watched: unwatched, the first layer's kernel and bias gradients are summed from the
// windows, the same products in another order (test_ops_conv's first_layer_weights_from_the_windows).
BOOST_AUTO_TEST_CASE(sequential_fuses_conv2d_and_max_pool_bit_for_bit) {
    Sequential model{Conv2D(4, {3, 3}, "relu"),
                     MaxPool2D(),
                     Conv2D(5, {3, 3}, "", {1, 1}, "same"),
                     MaxPool2D(),
                     Flatten(),
                     Dense(3)};
    model.build(Shape{2, 13, 12}, 3); // 13×12 → 11×10 → 5×5 → 5×5 → 2×2: odd rows and columns left out
    const Tensor x = random(Shape{6, 2, 13, 12}, -1.0f, 1.0f, 9);
    const Tensor w = random(Shape{6, 3}, -1.0f, 1.0f, 10);
    const auto run = [&](bool whole_model) {
        GradientTape tape;
        tape.watch(x);
        Tensor y = x;
        if (whole_model) {
            y = model(x);
        } else {
            for (const auto& layer : model.layers()) y = (*layer)(y);
        }
        std::vector<Tensor> out = tape.gradient(mul(y, w), model.trainable_variables());
        out.push_back(y);
        return out;
    };
    const std::vector<Tensor> fused = run(true), in_turn = run(false);
    BOOST_TEST_REQUIRE(fused.size() == 7u); // 3 kernels, 3 biases, the output
    for (std::size_t i = 0; i < fused.size(); ++i) BOOST_TEST(same_bits(fused[i], in_turn[i]), "result " << i);
}

BOOST_AUTO_TEST_CASE(conv2d_initial_kernel_uses_receptive_field_fans) {
    Conv2D conv(64, {3, 3}, "relu");
    build(conv, Shape{32, 13, 13});
    const double limit = std::sqrt(6.0 / (32 * 9 + 64 * 9));
    float largest = 0;
    for (float v : conv.variables()[0].value().to_floats()) largest = std::max(largest, std::fabs(v));
    BOOST_TEST(largest <= limit);
    BOOST_TEST(largest > 0.99 * limit);
    BOOST_TEST(conv.count_params() == 18496u);
}

BOOST_AUTO_TEST_CASE(pooling_matches_direct_loops) {
    const Tensor x = random(Shape{2, 3, 5, 6}, 0.1f, 2.0f, 7);
    for (const auto& [pool, stride] : std::vector<std::pair<Size2, Size2>>{{{2, 2}, {0, 0}}, {{3, 2}, {1, 2}}}) {
        MaxPool2D mp(pool, stride);
        AvgPool2D ap(pool, stride);
        build(mp, Shape{3, 5, 6});
        build(ap, Shape{3, 5, 6});
        const Size2 s = mp.stride();
        BOOST_TEST((s == (stride[0] == 0 ? pool : stride)));
        const std::size_t ho = (5 - pool[0]) / s[0] + 1, wo = (6 - pool[1]) / s[1] + 1;
        BOOST_TEST(mp.output_shape() == (Shape{3, ho, wo}));
        BOOST_TEST(ap.output_shape() == (Shape{3, ho, wo}));
        std::vector<float> max_ref;
        std::vector<double> avg_ref, avg_size;
        for (std::size_t n = 0; n < 2; ++n)
            for (std::size_t c = 0; c < 3; ++c)
                for (std::size_t i = 0; i < ho; ++i)
                    for (std::size_t j = 0; j < wo; ++j) {
                        float m = -INFINITY;
                        double sum = 0, size = 0;
                        for (std::size_t p = 0; p < pool[0]; ++p)
                            for (std::size_t q = 0; q < pool[1]; ++q) {
                                const float v = x.at({n, c, i * s[0] + p, j * s[1] + q});
                                m = std::max(m, v);
                                sum += v;
                                size += std::fabs(v);
                            }
                        max_ref.push_back(m);
                        avg_ref.push_back(sum / double(pool[0] * pool[1]));
                        avg_size.push_back(size / double(pool[0] * pool[1]));
                    }
        check_close(mp(x), max_ref, 0.0f, "MaxPool2D " + mp.config());
        // A float32 sum of n terms and at most two more roundings (the division, or 1/n and the product
        // with it): within the bound of a sum of n + 2 terms, scaled by 1/n.
        check_sums(ap(x), avg_ref, avg_size, pool[0] * pool[1] + 2, "AvgPool2D " + ap.config());
    }
}

// ---- LayerNorm, Embedding, Flatten, Activation, Dropout ----

BOOST_AUTO_TEST_CASE(layer_norm_normalizes_the_last_axis) {
    LayerNorm norm; // Keras's epsilon 1e-3
    build(norm, Shape{3, 6});
    BOOST_TEST(norm.epsilon() == 1e-3f);
    std::vector<Variable> vars = norm.variables();
    BOOST_TEST_REQUIRE(vars.size() == 2u);
    BOOST_TEST(vars[0].value().to_floats() == std::vector<float>(6, 1.0f));
    BOOST_TEST(vars[1].value().to_floats() == std::vector<float>(6, 0.0f));
    const Tensor gamma = random(Shape{6}, 0.5f, 1.5f, 8), beta = random(Shape{6}, 0.1f, 1.0f, 9);
    vars[0].assign(gamma);
    vars[1].assign(beta);
    const Tensor x = random(Shape{2, 3, 6}, 0.1f, 0.5f, 10); // small values: epsilon matters
    std::vector<float> expected;
    for (std::size_t r = 0; r < 6; ++r) {
        double mean = 0, var = 0;
        for (std::size_t j = 0; j < 6; ++j) mean += x.flat(r * 6 + j) / 6.0;
        for (std::size_t j = 0; j < 6; ++j) var += std::pow(x.flat(r * 6 + j) - mean, 2) / 6.0;
        for (std::size_t j = 0; j < 6; ++j)
            expected.push_back(
                float(gamma.flat(j) * (x.flat(r * 6 + j) - mean) / std::sqrt(var + 1e-3) + beta.flat(j)));
    }
    check_close(norm(x), expected, 1e-5f, "LayerNorm");
}

BOOST_AUTO_TEST_CASE(embedding_looks_up_rows) {
    Embedding embed(10, 4);
    build(embed, Shape{3});
    BOOST_TEST(embed.output_shape() == (Shape{3, 4}));
    std::vector<Variable> vars = embed.variables();
    BOOST_TEST_REQUIRE(vars.size() == 1u);
    BOOST_TEST(vars[0].shape() == (Shape{10, 4}));
    for (float v : vars[0].value().to_floats()) BOOST_TEST((v >= -0.05f && v < 0.05f && v != 0.0f));
    const std::vector<float> ids{3, 0, 9, 3, 3, 1};
    const Tensor y = embed(Tensor::from_floats(Shape{2, 3}, ids));
    BOOST_TEST(y.shape() == (Shape{2, 3, 4}));
    for (std::size_t i = 0; i < ids.size(); ++i)
        for (std::size_t j = 0; j < 4; ++j)
            BOOST_TEST(y.flat(i * 4 + j) == vars[0].value().at({std::size_t(ids[i]), j}));
}

// Under mixed_float16 the ids are read as given, not rounded to float16 (3001 is not a float16 value), and
// the output is in float16.
BOOST_AUTO_TEST_CASE(embedding_keeps_ids_exact_under_float16) {
    PolicyScope scope("mixed_float16");
    Embedding embed(4000, 2);
    build(embed, Shape{1});
    const Tensor y = embed(Tensor::from_floats(Shape{2, 1}, std::vector<float>{3001, 3000}));
    BOOST_TEST(y.dtype() == Dtype::float16);
    const Tensor table = embed.variables()[0].read();
    BOOST_TEST(y.at({0, 0, 0}) == table.at({3001, 0}));
    BOOST_TEST(y.at({1, 0, 1}) == table.at({3000, 1}));
}

BOOST_AUTO_TEST_CASE(embedding_validates_ids) {
    Sequential model{Embedding(5, 2)};
    model.build(Shape{3});
    const auto call = [&](std::vector<float> ids) { model(Tensor::from_floats(Shape{2, 3}, ids)); };
    BOOST_TEST((throws_with<std::invalid_argument>(
        [&] {
            call({0, 1, 2, 3, 4, 5});
        },
        {"embedding", "position 5", "is 5", "[0, 5)"})));
    BOOST_TEST((throws_with<std::invalid_argument>([&] { call({0, 1, 2.5f, 3, 4, 0}); }, {"position 2", "2.5"})));
    BOOST_TEST((throws_with<std::invalid_argument>([&] { call({0, -1, 2, 3, 4, 0}); }, {"position 1", "-1"})));
    BOOST_TEST((throws_with<std::invalid_argument>([&] { call({0, 1, 2, NAN, 4, 0}); }, {"position 3", "nan"})));
    BOOST_CHECK_NO_THROW(call({0, 1, 2, 3, 4, 0}));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Embedding(0, 3); }, {"vocab = 0"})));
}

BOOST_AUTO_TEST_CASE(flatten_and_activation) {
    Flatten flatten;
    build(flatten, Shape{2, 3, 4});
    BOOST_TEST(flatten.output_shape() == (Shape{24}));
    const Tensor x = random(Shape{2, 2, 3, 4}, 0.1f, 2.0f, 11);
    const Tensor f = flatten(x);
    BOOST_TEST(f.shape() == (Shape{2, 24}));
    BOOST_TEST(f.to_floats() == x.to_floats());
    Flatten scalar;
    build(scalar, Shape{});
    BOOST_TEST(scalar.output_shape() == (Shape{1}));

    const std::vector<std::pair<std::string, std::function<double(double)>>> functions{
        {"linear", [](double v) { return v; }},
        {"relu", [](double v) { return std::max(v, 0.0); }},
        {"tanh", [](double v) { return std::tanh(v); }},
        {"sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
        {"gelu", [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }},
    };
    for (const auto& [name, fn] : functions) {
        Activation act(name);
        build(act, Shape{2, 3, 4});
        std::vector<float> expected;
        for (float v : x.to_floats()) expected.push_back(float(fn(v)));
        check_close(act(x), expected, 1e-6f, "Activation " + name);
    }
    BOOST_TEST((throws_with<std::invalid_argument>([] { Activation("softmax2"); },
                                                   {"softmax2", "relu", "gelu", "tanh", "sigmoid", "linear"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Dense(4, "Relu"); }, {"'Relu'", "relu"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Conv2D(4, {3, 3}, "elu"); }, {"'elu'"})));
}

BOOST_AUTO_TEST_CASE(rescaling_scales_and_shifts_in_the_input_dtype) {
    Rescaling shift(1.0f / 255, -0.5f);
    build(shift, Shape{2, 3});
    const Tensor x = random(Shape{4, 2, 3}, 0.0f, 255.0f, 31);
    std::vector<float> expected;
    for (float v : x.to_floats()) expected.push_back(v * (1.0f / 255) - 0.5f);
    check_close(shift(x), expected, 1e-6f, "Rescaling(1/255, -0.5)");
    BOOST_TEST(shift.config() == "scale=0.00392156886, offset=-0.5");

    // A power of two moves float16 values by whole binades: exact while they stay normal.
    Rescaling up(4096.0f);
    up.set_policy(amp::Policy("mixed_float16")); // a float16 layer
    build(up, Shape{3});
    const std::vector<float> values{0.1f, -3.0f, 7.5f};
    const Tensor h = Tensor::from_floats(Shape{1, 3}, values, Dtype::float16);
    const Tensor y = up(h);
    BOOST_TEST(y.dtype() == Dtype::float16);
    const std::vector<float> hv = h.to_floats(), yv = y.to_floats();
    for (std::size_t i = 0; i < hv.size(); ++i) BOOST_TEST(yv[i] == hv[i] * 4096.0f);

    BOOST_TEST((throws_with<std::invalid_argument>([] { Rescaling(std::nanf("")); }, {"Rescaling", "finite"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Rescaling(1.0f, std::numeric_limits<float>::infinity()); },
                                                   {"offset=inf"})));
}

BOOST_AUTO_TEST_CASE(dropout_only_when_training) {
    Sequential model{Dropout(0.25f)};
    model.build(Shape{1000});
    const Tensor x = Tensor::full(Shape{2, 1000}, 2.0f);
    BOOST_TEST(same_bits(model(x), x)); // inference: identity
    BOOST_TEST((throws_with<std::logic_error>([&] { model(x, {.training = true}); }, {"dropout", "dropout_rng"})));

    Rng rng(3), same(3);
    const Tensor y = model(x, {.training = true, .dropout_rng = &rng});
    std::size_t kept = 0;
    for (float v : y.to_floats()) {
        BOOST_TEST_REQUIRE((v == 0.0f || v == 2.0f / 0.75f));
        kept += v != 0.0f;
    }
    BOOST_TEST(kept > 1350u); // 1500 expected, σ ≈ 19
    BOOST_TEST(kept < 1650u);
    BOOST_TEST(same_bits(model(x, {.training = true, .dropout_rng = &same}), y));
    BOOST_TEST(!same_bits(model(x, {.training = true, .dropout_rng = &rng}), y)); // the generator moved on
    BOOST_TEST((throws_with<std::invalid_argument>([] { Dropout(1.0f); }, {"[0, 1)", "1.0"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Dropout(-0.1f); }, {"[0, 1)"})));
}

// ---- gradients through every layer ----

BOOST_AUTO_TEST_CASE(gradients_through_core_layers) {
    Dense dense(3, "tanh");
    build(dense, Shape{4});
    dense.variables()[1].assign(random(Shape{3}, 0.1f, 0.5f, 12));
    check_layer_gradients("Dense tanh", dense, random(Shape{3, 4}, 0.1f, 1.0f, 13));

    Dense deep(4, "gelu");
    build(deep, Shape{2, 3});
    check_layer_gradients("Dense gelu (2, 3)", deep, random(Shape{2, 2, 3}, 0.1f, 1.0f, 14));

    Activation relu("relu");
    build(relu, Shape{5});
    check_layer_gradients("Activation relu", relu, random(Shape{2, 5}, 0.1f, 1.0f, 15));

    Rescaling rescaling(-0.75f, 0.25f);
    build(rescaling, Shape{5});
    check_layer_gradients("Rescaling", rescaling, random(Shape{2, 5}, 0.1f, 1.0f, 32));

    Flatten flatten;
    build(flatten, Shape{2, 3});
    check_layer_gradients("Flatten", flatten, random(Shape{2, 2, 3}, 0.1f, 1.0f, 16));

    Dropout dropout(0.4f);
    build(dropout, Shape{6});
    check_layer_gradients("Dropout training", dropout, random(Shape{3, 6}, 0.1f, 1.0f, 17), [] {
        static Rng rng;
        rng = Rng(21); // the same mask at every evaluation
        return CallContext{.training = true, .dropout_rng = &rng};
    });
}

BOOST_AUTO_TEST_CASE(gradients_through_conv_and_pooling) {
    Conv2D valid(2, {3, 3}, "tanh", {2, 1});
    build(valid, Shape{2, 7, 5});
    valid.variables()[1].assign(random(Shape{2}, 0.1f, 0.5f, 18));
    check_layer_gradients("Conv2D valid stride (2, 1)", valid, random(Shape{2, 2, 7, 5}, 0.1f, 1.0f, 19));

    Conv2D same(2, {3, 2}, "sigmoid", {2, 2}, "same");
    build(same, Shape{2, 6, 5});
    check_layer_gradients("Conv2D same stride 2", same, random(Shape{1, 2, 6, 5}, 0.1f, 1.0f, 20));

    MaxPool2D max_pool({2, 2});
    build(max_pool, Shape{2, 4, 5});
    check_layer_gradients("MaxPool2D", max_pool, random(Shape{2, 2, 4, 5}, 0.1f, 2.0f, 21));

    AvgPool2D avg_pool({3, 3}, {1, 2});
    build(avg_pool, Shape{2, 5, 5});
    check_layer_gradients("AvgPool2D", avg_pool, random(Shape{2, 2, 5, 5}, 0.1f, 2.0f, 22));
}

BOOST_AUTO_TEST_CASE(gradients_through_layer_norm_and_embedding) {
    LayerNorm norm;
    build(norm, Shape{2, 5});
    norm.variables()[0].assign(random(Shape{5}, 0.5f, 1.5f, 23));
    norm.variables()[1].assign(random(Shape{5}, 0.1f, 1.0f, 24));
    check_layer_gradients("LayerNorm", norm, random(Shape{2, 2, 5}, 0.1f, 2.0f, 25));

    Embedding embed(6, 3); // the ids get no gradient: only the table is checked
    build(embed, Shape{4});
    const Tensor ids = Tensor::from_floats(Shape{2, 4}, std::vector<float>{1, 3, 1, 0, 5, 1, 3, 3});
    check_variable_gradients(
        "Embedding", [&] { return embed(ids); }, embed.variables());
}

// ---- dtype policy ----

BOOST_AUTO_TEST_CASE(mixed_float16_computes_in_float16_with_float32_masters) {
    Tensor y32, w32;
    std::vector<Tensor> g32;
    const Tensor x = random(Shape{2, 1, 6, 6}, 0.1f, 1.0f, 26);
    for (const char* policy : {"float32", "mixed_float16"}) {
        PolicyScope scope(policy);
        Sequential model{Conv2D(2, {3, 3}, "relu"), Flatten(), LayerNorm(), Dense(3)};
        model.build(Shape{1, 6, 6}, 4);
        const Dtype compute = amp::Policy(policy).compute_dtype();
        for (const auto& layer : model.layers()) BOOST_TEST(layer->policy().name() == policy);
        for (const Variable& v : model.variables()) {
            BOOST_TEST(v.value().dtype() == Dtype::float32);
            BOOST_TEST(v.working_dtype() == compute);
            BOOST_TEST(v.read().dtype() == compute);
        }
        GradientTape tape;
        const Tensor y = model(x);               // a float32 batch, cast by the first layer
        BOOST_TEST(y.dtype() == Dtype::float32); // the last layer's result (in `compute`), widened exactly
        BOOST_TEST(model.layers().back()->policy().compute_dtype() == compute);
        const std::vector<Tensor> g = tape.gradient(y, model.trainable_variables());
        for (const Tensor& gi : g) BOOST_TEST(gi.dtype() == compute);
        BOOST_TEST(model.summary().find(policy) != std::string::npos);
        if (compute == Dtype::float32) {
            y32 = y, g32 = g;
            continue;
        }
        // The same weights (built from one seed) give the float32 results within float16 rounding.
        check_close(y, y32.to_floats(), 1e-2f, "mixed_float16 output");
        for (std::size_t k = 0; k < g.size(); ++k) {
            float scale = 0;
            for (float v : g32[k].to_floats()) scale = std::max(scale, std::fabs(v));
            for (std::size_t i = 0; i < g[k].size(); ++i)
                BOOST_TEST(std::fabs(g[k].flat(i) - g32[k].flat(i)) <= 2e-2f * scale);
        }
    }
}

// A layer's own policy wins over the global one, and building fixes it.
BOOST_AUTO_TEST_CASE(layer_policy_overrides_the_global_one) {
    PolicyScope scope("mixed_float16");
    Dense dense(2);
    dense.set_policy(amp::Policy("mixed_bfloat16"));
    build(dense, Shape{3});
    amp::set_global_policy("float32");
    BOOST_TEST(dense.policy().name() == "mixed_bfloat16");
    BOOST_TEST(dense(random(Shape{1, 3}, 0.1f, 1.0f, 27)).dtype() == Dtype::bfloat16);
    BOOST_TEST(dense.variables()[0].value().dtype() == Dtype::float32);
}

// ---- Sequential ----

BOOST_AUTO_TEST_CASE(sequential_names_layers_as_keras) {
    Sequential model{Conv2D(2, {3, 3}), MaxPool2D(),   Conv2D(2, {1, 1}),  AvgPool2D({1, 1}), Flatten(),      Dense(4),
                     LayerNorm(),       Dropout(0.5f), Activation("relu"), Dense(3),          Embedding(4, 2)};
    std::vector<std::string> names;
    for (const auto& layer : model.layers()) names.push_back(layer->name());
    const std::vector<std::string> expected{
        "conv2d",  "max_pooling2d", "conv2d_1", "average_pooling2d", "flatten", "dense", "layer_normalization",
        "dropout", "activation",    "dense_1",  "embedding"};
    BOOST_TEST(names == expected, boost::test_tools::per_element());

    Dense named(2);
    named.set_name("dense");
    Sequential other;
    other.add(std::move(named));
    other.add(Dense(2));
    BOOST_TEST(other.layers()[1]->name() == "dense_1");
    Dense clash(2);
    clash.set_name("dense_1");
    BOOST_TEST((throws_with<std::invalid_argument>([&] { other.add(clash); }, {"'dense_1'"})));
    other.build(Shape{5});
    BOOST_TEST(other.variables()[2].name() == "dense_1/kernel");
    BOOST_TEST(other.variables()[3].name() == "dense_1/bias");
    BOOST_TEST((throws_with<std::logic_error>([&] { other.add(Dense(1)); }, {"built"})));
    BOOST_TEST((throws_with<std::logic_error>([&] { other.build(Shape{5}); }, {"already built"})));
}

BOOST_AUTO_TEST_CASE(sequential_is_its_layers_in_turn) {
    Sequential model{Dense(6, "relu"), Dropout(0.5f), Dense(2)};
    BOOST_TEST((throws_with<std::logic_error>([&] { model(Tensor(Shape{1, 4})); }, {"build"})));
    BOOST_TEST((throws_with<std::logic_error>([&] { model.summary(); }, {"build"})));
    BOOST_TEST((throws_with<std::logic_error>([&] { model.output_shape(); }, {"build"})));
    model.build(Shape{4}, 3);
    BOOST_TEST(model.built());
    BOOST_TEST(model.input_shape() == (Shape{4}));
    BOOST_TEST(model.output_shape() == (Shape{2}));
    const Tensor x = random(Shape{5, 4}, 0.1f, 1.0f, 28);
    const auto& l = model.layers();
    BOOST_TEST(same_bits(model(x), (*l[2])((*l[1])((*l[0])(x)))));
    BOOST_TEST(model.variables().size() == 4u);
    BOOST_TEST(model.trainable_variables().size() == 4u);
    BOOST_TEST(model.count_params() == 4u * 6 + 6 + 6 * 2 + 2);
}

BOOST_AUTO_TEST_CASE(summary_of_the_mlp) {
    Sequential model = mlp();
    model.build(Shape{1, 28, 28}, 1);
    std::size_t counted = 0;
    for (const Variable& v : model.variables()) counted += v.shape().elements();
    BOOST_TEST(counted == 784u * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
    BOOST_TEST(model.count_params() == 669706u);
    const std::string s = model.summary();
    BOOST_TEST_MESSAGE(s);
    for (const char* part : {"Model: \"sequential\"",
                             "Layer (type)",
                             "Output Shape",
                             "Param #",
                             "Dtype policy",
                             "flatten (Flatten)",
                             "(None, 784)",
                             "dense (Dense)",
                             "(None, 512)",
                             "401,920",
                             "dense_1 (Dense)",
                             "262,656",
                             "dense_2 (Dense)",
                             "(None, 10)",
                             "5,130",
                             "float32",
                             "units=512, activation=relu",
                             "Total params: 669,706 (2.55 MB)",
                             "Trainable params: 669,706 (2.55 MB)",
                             "Non-trainable params: 0 (0.00 B)"})
        BOOST_TEST(s.find(part) != std::string::npos, "summary lacks '" << part << "'");
    // Every table line has the same width (in characters; the box drawing is 3 bytes each in UTF-8).
    std::istringstream lines(s);
    std::string line;
    std::set<std::size_t> widths;
    while (std::getline(lines, line)) {
        if (line.empty() || (line[0] != '\xe2')) continue;
        std::size_t chars = 0;
        for (unsigned char c : line) chars += (c & 0xC0) != 0x80;
        widths.insert(chars);
    }
    BOOST_TEST(widths.size() == 1u);
}

BOOST_AUTO_TEST_CASE(summary_of_the_cnn) {
    Sequential model = make_model("cnn");
    model.build(Shape{1, 28, 28}, 1);
    const std::vector<std::size_t> params{320, 0, 18496, 0, 0, 204928, 1290};
    const std::vector<Shape> shapes{Shape{32, 26, 26}, Shape{32, 13, 13}, Shape{64, 11, 11}, Shape{64, 5, 5},
                                    Shape{1600},       Shape{128},        Shape{10}};
    BOOST_TEST_REQUIRE(model.layers().size() == params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
        BOOST_TEST(model.layers()[i]->count_params() == params[i]);
        BOOST_TEST(model.layers()[i]->output_shape() == shapes[i]);
    }
    BOOST_TEST(model.count_params() == 225034u);
    const std::string s = model.summary();
    BOOST_TEST_MESSAGE(s);
    for (const char* part : {"conv2d (Conv2D)", "(None, 32, 26, 26)", "max_pooling2d (MaxPooling2D)",
                             "conv2d_1 (Conv2D)", "18,496", "max_pooling2d_1", "(None, 64, 5, 5)", "(None, 1600)",
                             "204,928", "Total params: 225,034 (879.04 KB)", "filters=32, kernel_size=(3, 3)"})
        BOOST_TEST(s.find(part) != std::string::npos, "summary lacks '" << part << "'");
    const Tensor logits = model(random(Shape{2, 1, 28, 28}, 0.0f, 1.0f, 29));
    BOOST_TEST(logits.shape() == (Shape{2, 10}));
}

BOOST_AUTO_TEST_CASE(same_seed_same_weights) {
    const auto weights = [](std::string_view name, std::uint64_t seed) {
        Sequential model = make_model(name);
        model.build(Shape{1, 28, 28}, seed);
        return model.variables();
    };
    for (const char* name : {"mlp", "cnn"}) {
        const std::vector<Variable> a = weights(name, 7), b = weights(name, 7), c = weights(name, 8);
        BOOST_TEST_REQUIRE(a.size() == c.size());
        bool all_same = true, any_same_kernel = false;
        for (std::size_t i = 0; i < a.size(); ++i) {
            all_same = all_same && same_bits(a[i].value(), b[i].value());
            if (a[i].name().ends_with("/kernel")) any_same_kernel |= same_bits(a[i].value(), c[i].value());
        }
        BOOST_TEST(all_same, name);
        BOOST_TEST(!any_same_kernel, name);
    }
}

BOOST_AUTO_TEST_CASE(wrong_input_shapes_name_both_shapes) {
    Sequential cnn_model = cnn();
    BOOST_TEST(
        (throws_with<shape_error>([&] { cnn_model.build(Shape{784}); }, {"'conv2d' (Conv2D)", "(C, H, W)", "(784)"})));
    Sequential small{Conv2D(4, {5, 5})};
    BOOST_TEST((throws_with<shape_error>([&] { small.build(Shape{1, 4, 9}); }, {"H >= 5", "(1, 4, 9)"})));
    Sequential pool{MaxPool2D({3, 3})};
    BOOST_TEST((throws_with<shape_error>([&] { pool.build(Shape{2, 8}); }, {"max_pooling2d", "(2, 8)"})));
    Sequential dense{Dense(3)};
    BOOST_TEST((throws_with<shape_error>([&] { dense.build(Shape{}); }, {"'dense' (Dense)", "(..., in)", "()"})));
    Sequential norm{LayerNorm()};
    BOOST_TEST((throws_with<shape_error>([&] { norm.build(Shape{3, 0}); }, {"layer_normalization", "(3, 0)"})));

    Sequential model = mlp();
    model.build(Shape{1, 28, 28});
    BOOST_TEST((throws_with<shape_error>([&] { model(Tensor(Shape{2, 784})); }, {"(1, 28, 28)", "(2, 784)"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Conv2D(4, {3, 3}, "", {1, 1}, "full"); }, {"\"full\""})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Conv2D(4, {0, 3}); }, {"kernel size", "(0, 3)"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { MaxPool2D({2, 0}); }, {"(2, 0)"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { Dense(0); }, {"units"})));
}

// An input without the batch axis: the message says which rank and shape a batch has and what was given,
// and never names one shape as both the expected and the received one.
BOOST_AUTO_TEST_CASE(an_input_without_the_batch_axis_is_told_to_add_it) {
    Sequential model{Flatten(), Dense(10)};
    model.build(Shape{28, 28});
    BOOST_TEST(model(Tensor(Shape{1, 28, 28})).shape() == (Shape{1, 10}));
    BOOST_TEST(model(Tensor(Shape{2, 28, 28})).shape() == (Shape{2, 10}));
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            model(Tensor(Shape{28, 28}));
        },
        {"layer 'flatten' (Flatten) expects a batch of examples of shape (28, 28), i.e. a tensor of rank 3 (batch, "
         "28, 28); got a tensor of shape (28, 28) (rank 2): add the batch axis",
         "(1, 28, 28)"})));
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            model(Tensor(Shape{2, 784}));
        },
        {"shape (28, 28)", "rank 3", "got a tensor of shape (2, 784) (rank 2)"})));
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            model(Tensor(Shape{2, 28, 27}));
        },
        {"(2, 28, 27) (rank 3), whose examples have shape (28, 27)"})));

    Sequential channels{Flatten(), Dense(10)}; // images with their channel axis, as the zoo's models
    channels.build(Shape{1, 28, 28});
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            channels(Tensor(Shape{1, 28, 28}));
        },
        {"of shape (1, 28, 28), i.e. a tensor of rank 4 (batch, 1, 28, 28)",
         "got a tensor of shape (1, 28, 28) (rank 3): add the batch axis"})));
    // Every layer checks its input in the same place, named or not, after the first one too.
    Dense unnamed(3);
    build(unnamed, Shape{4});
    BOOST_TEST((throws_with<shape_error>(
        [&] { unnamed(Tensor(Shape{4})); },
        {"Dense layer expects a batch of examples of shape (4)", "(batch, 4)", "add the batch axis"})));
    Sequential deeper{Dense(8), Dense(2)};
    deeper.build(Shape{4});
    Tensor h = Tensor(Shape{3, 8});
    BOOST_TEST((throws_with<shape_error>([&] { (*deeper.layers()[1])(Tensor(Shape{8})); },
                                         {"layer 'dense_1' (Dense)", "rank 2 (batch, 8)", "(8) (rank 1)"})));
    BOOST_TEST((*deeper.layers()[1])(h).shape() == (Shape{3, 2}));
}

// Dense(units, "softmax"): probabilities over the last axis (the units), with their gradients.
BOOST_AUTO_TEST_CASE(dense_with_softmax_and_sigmoid) {
    Dense linear(5), soft(5, "softmax"), sig(5, "sigmoid");
    for (Dense* d : {&linear, &soft, &sig}) build(*d, Shape{2, 4}, 7); // the same weights in all three
    const Tensor x = random(Shape{3, 2, 4}, 0.1f, 2.0f, 31);
    const std::vector<float> z = linear(x).to_floats(), p = soft(x).to_floats(), s = sig(x).to_floats();
    BOOST_TEST(soft(x).shape() == (Shape{3, 2, 5}));
    std::vector<float> expected_p, expected_s;
    for (std::size_t row = 0; row < 6; ++row) {
        double top = -INFINITY, total = 0;
        for (std::size_t j = 0; j < 5; ++j) top = std::max(top, double(z[row * 5 + j]));
        for (std::size_t j = 0; j < 5; ++j) total += std::exp(z[row * 5 + j] - top);
        for (std::size_t j = 0; j < 5; ++j) expected_p.push_back(float(std::exp(z[row * 5 + j] - top) / total));
    }
    for (float v : z) expected_s.push_back(float(1 / (1 + std::exp(-double(v)))));
    check_close(soft(x), expected_p, 1e-6f, "Dense softmax");
    check_close(sig(x), expected_s, 1e-6f, "Dense sigmoid");
    BOOST_TEST(soft.config() == "units=5, activation=softmax");

    soft.variables()[1].assign(random(Shape{5}, 0.1f, 0.5f, 32));
    check_layer_gradients("Dense softmax", soft, random(Shape{3, 2, 4}, 0.1f, 1.0f, 33));
    check_layer_gradients("Dense sigmoid", sig, random(Shape{3, 2, 4}, 0.1f, 1.0f, 34));
    Activation act("softmax");
    build(act, Shape{6});
    check_layer_gradients("Activation softmax", act, random(Shape{2, 6}, 0.1f, 2.0f, 35));

    BOOST_TEST((throws_with<std::invalid_argument>(
        [] { Dense(10, "softmax2"); }, {"unknown activation 'softmax2'", "\"linear\" (identity)", "\"relu\"",
                                        "\"gelu\"", "\"tanh\"", "\"sigmoid\"", "\"softmax\""})));
}

BOOST_AUTO_TEST_CASE(model_lookup) {
    std::vector<std::string> names;
    for (std::string_view n : model_names()) names.emplace_back(n);
    BOOST_TEST(names == (std::vector<std::string>{"mlp", "cnn", "vit"}), boost::test_tools::per_element());
    BOOST_TEST(make_model("mlp").layers().size() == 4u);
    BOOST_TEST(!make_model("vit").layers().empty());
    BOOST_TEST((throws_with<std::invalid_argument>([] { make_model("resnet"); }, {"'resnet'", "mlp", "cnn", "vit"})));
}

// ---- TensorDataset ----

BOOST_AUTO_TEST_CASE(tensor_dataset_gathers_rows) {
    const Tensor x = random(Shape{5, 2, 3}, 0.1f, 1.0f, 30).to(Dtype::float16);
    const TensorDataset data(x, {10, 11, 12, 13, 14});
    BOOST_TEST(data.size() == 5u);
    BOOST_TEST(data.example_shape() == (Shape{2, 3}));
    Tensor batch;
    std::vector<std::int32_t> labels;
    const std::vector<std::size_t> indices{4, 0, 4};
    data.batch(indices, batch, labels);
    BOOST_TEST(batch.shape() == (Shape{3, 2, 3}));
    BOOST_TEST(batch.dtype() == Dtype::float32);
    BOOST_TEST(labels == (std::vector<std::int32_t>{14, 10, 14}), boost::test_tools::per_element());
    for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 6; ++j) BOOST_TEST(batch.flat(i * 6 + j) == x.flat(indices[i] * 6 + j));

    const std::vector<std::size_t> bad{1, 5};
    BOOST_TEST((throws_with<std::out_of_range>([&] { data.batch(bad, batch, labels); }, {"index 5", "5 examples"})));
    BOOST_TEST(batch.shape() == (Shape{3, 2, 3})); // untouched
    data.batch({}, batch, labels);
    BOOST_TEST(batch.shape() == (Shape{0, 2, 3}));
    BOOST_TEST(labels.empty());

    using labels_t = std::vector<std::int32_t>;
    BOOST_TEST((throws_with<std::invalid_argument>(
        [&] {
            TensorDataset(x, labels_t{1, 2});
        },
        {"5 examples", "2 labels"})));
    BOOST_TEST((throws_with<std::invalid_argument>([] { TensorDataset(Tensor(), labels_t{}); }, {"()"})));
}
