#define BOOST_TEST_MODULE ops_loss
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <utility>

using namespace mixprec::autodiff;

namespace {

Tensor random(const Shape& shape, float lo, float hi, unsigned seed, bool positive = false) {
    return op_checks::uniform(shape, lo, hi, seed, positive);
}

// Half-precision tolerances, relative to the largest float32 gradient of each input. A loss is a float32
// scalar, so the gradient check's seed is not rounded: each gradient is one float32 computation rounded
// once to the format (2^-11 for float16, 2^-8 for bfloat16) from inputs that are already exact in it.
// 4 units leaves room for the float32 arithmetic (1 unit passes today) and is far below any real error.
constexpr double f16_tol = 4 * 0x1p-11, bf16_tol = 4 * 0x1p-8;

void check(const std::string& name, const Function& f, const std::vector<Tensor>& inputs) {
    op_checks::check_gradients(name, f, inputs, f16_tol, bf16_tol);
}

using op_checks::throws_with;

const std::vector<std::int32_t> labels4{0, 3, 4, 3};

/// t + offsets, element by element (float32): a prediction whose differences from t are chosen.
Tensor plus(const Tensor& t, const std::vector<float>& offsets) {
    std::vector<float> v = t.to_floats();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] += offsets[i % offsets.size()];
    return Tensor::from_floats(t.shape(), v);
}

Tensor floats(const Shape& shape, const std::vector<float>& v, Dtype d = Dtype::float32) {
    return Tensor::from_floats(shape, v, d);
}

/// Loss and the gradients of (y_true, y_pred) under one tape.
struct Taped {
    Tensor loss;
    std::vector<float> g_true, g_pred;
};
template <class F>
Taped taped(const Tensor& y_true, const Tensor& y_pred, F f) {
    GradientTape tape;
    tape.watch(y_true);
    tape.watch(y_pred);
    Taped r{f(y_true, y_pred), {}, {}};
    const std::vector<Tensor> g = tape.gradient(r.loss, {y_true, y_pred});
    BOOST_TEST((g[0].dtype() == y_true.dtype() && g[1].dtype() == y_pred.dtype()));
    r.g_true = g[0].to_floats();
    r.g_pred = g[1].to_floats();
    return r;
}

/// Elementwise |actual - expected| ≤ tol |expected| (so an expected 0 must be met exactly).
void near(const std::vector<float>& actual, const std::vector<double>& expected, double tol) {
    BOOST_TEST_REQUIRE(actual.size() == expected.size());
    for (std::size_t i = 0; i < actual.size(); ++i)
        BOOST_TEST(std::abs(actual[i] - expected[i]) <= tol * std::abs(expected[i]),
                   "element " << i << ": " << actual[i] << " vs " << expected[i]);
}

// Value tests: each expected value is a handful of float32 operations (each rounding by at most 2^-24
// relative) on exact inputs, summed over a few terms; 1e-6 relative is ~16 such roundings.
constexpr double f32_tol = 1e-6;
const double eps = probability_epsilon, one_minus_eps = double(1.0f - probability_epsilon); // 1 - 2^-23

} // namespace

BOOST_AUTO_TEST_CASE(crossentropy_gradients) {
    check("crossentropy from logits", [](const auto& in) { return sparse_categorical_crossentropy(labels4, in[0]); },
          {random(Shape{4, 5}, 0.1f, 3.0f, 1)});
    // Probabilities in [0.1, 1]: far from the clip at 1e-7, and the finite-difference step (1e-2) stays positive.
    check("crossentropy from probabilities",
          [](const auto& in) { return sparse_categorical_crossentropy(labels4, in[0], false); },
          {random(Shape{4, 5}, 0.1f, 1.0f, 2, true)});
}

// Uniform logits give log(classes) whatever their value and dtype; the loss is a float32 scalar.
BOOST_AUTO_TEST_CASE(crossentropy_values) {
    const std::vector<std::int32_t> labels{0, 9, 4};
    for (Dtype d : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
        const Tensor loss = sparse_categorical_crossentropy(labels, Tensor::full(Shape{3, 10}, 2.5f, d));
        BOOST_TEST(loss.dtype() == Dtype::float32);
        BOOST_TEST(loss.rank() == 0u);
        BOOST_TEST(loss.flat(0) == std::log(10.0f), boost::test_tools::tolerance(1e-6f));
    }
    // By hand: rows (1, 2, 3) with label 0 and (0, 0, ln 2) with label 2.
    const std::vector<float> z{1, 2, 3, 0, 0, std::log(2.0f)};
    const Tensor logits = Tensor::from_floats(Shape{2, 3}, z);
    const std::vector<std::int32_t> labels2{0, 2};
    const double row0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1.0, row1 = std::log(2.0);
    GradientTape tape;
    tape.watch(logits);
    const Tensor loss = sparse_categorical_crossentropy(labels2, logits);
    BOOST_TEST(loss.flat(0) == (row0 + row1) / 2, boost::test_tools::tolerance(1e-6));
    const Tensor g = tape.gradient(loss, {logits})[0];
    const double s0 = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    const double expected[6] = {(std::exp(1.0) / s0 - 1) / 2,
                                std::exp(2.0) / s0 / 2,
                                std::exp(3.0) / s0 / 2,
                                0.25 / 2,
                                0.25 / 2,
                                (0.5 - 1) / 2};
    for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(g.flat(i) == expected[i], boost::test_tools::tolerance(1e-6));

    // Probabilities: -log p[label], averaged; a zero probability is clipped at 1e-7 and gets no gradient.
    const std::vector<float> p{0.2f, 0.8f, 0.0f, 1.0f};
    const Tensor probs = Tensor::from_floats(Shape{2, 2}, p);
    const std::vector<std::int32_t> labels3{1, 0};
    GradientTape tape2;
    tape2.watch(probs);
    const Tensor clipped = sparse_categorical_crossentropy(labels3, probs, false);
    BOOST_TEST(clipped.flat(0) == (-std::log(0.8) - std::log(1e-7)) / 2, boost::test_tools::tolerance(1e-5));
    const std::vector<float> gp = tape2.gradient(clipped, {probs})[0].to_floats();
    BOOST_TEST(gp == (std::vector<float>{0.0f, -1.0f / 1.6f, 0.0f, 0.0f}), boost::test_tools::per_element());
}

// float16 logits near ±1e4 (exact in float16, whose spacing there is 8): e^(1e4) overflows even float32,
// so only the max-subtracted log-sum-exp gives the finite, correct loss and gradient.
BOOST_AUTO_TEST_CASE(crossentropy_is_stable_for_large_float16_logits) {
    const std::vector<float> z{10000, 9992, -10000, -10000, 10000, 10000};
    const Tensor logits = Tensor::from_floats(Shape{2, 3}, z, Dtype::float16);
    BOOST_TEST(logits.to_floats() == z);
    const std::vector<std::int32_t> labels{1, 0};
    GradientTape tape;
    tape.watch(logits);
    const Tensor loss = sparse_categorical_crossentropy(labels, logits);
    const double row0 = 8 + std::log1p(std::exp(-8.0)), row1 = 20000 + std::log(2.0);
    BOOST_TEST(std::isfinite(loss.flat(0)));
    BOOST_TEST(loss.flat(0) == (row0 + row1) / 2, boost::test_tools::tolerance(1e-6));
    const Tensor g = tape.gradient(loss, {logits})[0];
    BOOST_TEST(g.dtype() == Dtype::float16);
    const double p0 = 1 / (1 + std::exp(-8.0)), p1 = std::exp(-8.0) / (1 + std::exp(-8.0));
    const double expected[6] = {p0 / 2, (p1 - 1) / 2, 0, -0.5, 0.25, 0.25};
    for (std::size_t i = 0; i < 6; ++i) {
        BOOST_TEST(std::isfinite(g.flat(i)));
        BOOST_TEST(g.flat(i) == float(float16(float(expected[i]))));
    }
}

// The logits' gradient is stored in their dtype: a softmax probability of e^-20 ≈ 2e-9 underflows to 0 in
// float16 (smallest subnormal 6e-8) unless the loss is scaled first, as the loss scaler does.
BOOST_AUTO_TEST_CASE(crossentropy_gradient_underflows_in_float16_unless_scaled) {
    const std::vector<float> z{0, -20};
    const std::vector<std::int32_t> label{0};
    for (float s : {1.0f, 65536.0f}) {
        const Tensor logits = Tensor::from_floats(Shape{1, 2}, z, Dtype::float16);
        GradientTape tape;
        tape.watch(logits);
        const Tensor loss = scale(sparse_categorical_crossentropy(label, logits), s);
        const Tensor g = tape.gradient(loss, {logits})[0];
        const float expected = float(float16(float(s * std::exp(-20.0) / (1 + std::exp(-20.0)))));
        BOOST_TEST(g.flat(1) == expected);
        BOOST_TEST((g.flat(1) == 0) == (s == 1.0f));
    }
}

BOOST_AUTO_TEST_CASE(crossentropy_errors) {
    const Tensor logits(Shape{3, 5});
    const std::vector<std::int32_t> bad{0, 4, 7}, negative{-1, 0, 0}, two{0, 1}, none{};
    BOOST_TEST((throws_with<std::invalid_argument>([&] { sparse_categorical_crossentropy(bad, logits); },
                                                   {"index 2", "is 7", "[0, 5)"})));
    BOOST_TEST((throws_with<std::invalid_argument>([&] { sparse_categorical_crossentropy(negative, logits, false); },
                                                   {"index 0", "-1"})));
    BOOST_TEST(
        (throws_with<shape_error>([&] { sparse_categorical_crossentropy(two, logits); }, {"(3, 5)", "2 labels"})));
    BOOST_TEST((throws_with<shape_error>([&] { sparse_categorical_crossentropy(two, Tensor(Shape{2})); }, {"(2)"})));
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            sparse_categorical_crossentropy(none, Tensor(Shape{0, 5}));
        },
        {"(0, 5)"})));
}

BOOST_AUTO_TEST_CASE(mean_squared_error_gradients) {
    const auto f = [](const auto& in) { return mean_squared_error(in[0], in[1]); };
    check("mse (3, 4)", f, {random(Shape{3, 4}, 0.1f, 2.0f, 10), random(Shape{3, 4}, 0.1f, 2.0f, 11)});
    check("mse scalar", f, {random(Shape{}, 0.1f, 2.0f, 12), random(Shape{}, 0.1f, 2.0f, 13)});
}

// By hand, with the two inputs in different dtypes: each gradient comes back in its own dtype.
BOOST_AUTO_TEST_CASE(mean_squared_error_values) {
    const std::vector<float> t{1, 2, 3, 4}, p{1.5f, 2, 1, 4};
    const Tensor y_true = Tensor::from_floats(Shape{2, 2}, t),
                 y_pred = Tensor::from_floats(Shape{2, 2}, p, Dtype::float16);
    GradientTape tape;
    tape.watch(y_true);
    tape.watch(y_pred);
    const Tensor loss = mean_squared_error(y_true, y_pred);
    BOOST_TEST(loss.dtype() == Dtype::float32);
    BOOST_TEST(loss.rank() == 0u);
    BOOST_TEST(loss.flat(0) == (0.25f + 0 + 4 + 0) / 4);
    const std::vector<Tensor> g = tape.gradient(loss, {y_true, y_pred});
    BOOST_TEST(g[0].dtype() == Dtype::float32);
    BOOST_TEST(g[1].dtype() == Dtype::float16);
    BOOST_TEST(g[1].to_floats() == (std::vector<float>{0.25f, 0, -1, 0}), boost::test_tools::per_element());
    BOOST_TEST(g[0].to_floats() == (std::vector<float>{-0.25f, 0, 1, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(mean_squared_error_errors) {
    BOOST_TEST((throws_with<shape_error>(
        [] {
            mean_squared_error(Tensor(Shape{2, 3}), Tensor(Shape{3, 2}));
        },
        {"(2, 3)", "(3, 2)"})));
    BOOST_TEST((throws_with<shape_error>([] { mean_squared_error(Tensor(Shape{0}), Tensor(Shape{0})); }, {"(0)"})));
}

// The differences y_pred - y_true are at least 0.15 in magnitude (and at least 0.1 from Huber's δ = 1 and
// δ = 0.5), while the finite-difference step is 1e-2 · max(1, |x|) ≤ 0.04 and float16 moves a difference by
// under 0.01: no sample crosses a kink. Both inputs get a gradient.
const std::vector<float> offsets{0.3f, -1.6f, 0.7f, -0.2f, 2.1f, -1.4f, 0.9f, -0.35f, 1.8f, -0.8f, 0.15f, -2.4f};

BOOST_AUTO_TEST_CASE(mean_absolute_error_gradients) {
    const Tensor t = random(Shape{3, 4}, 0.1f, 2.0f, 20);
    check("mae", [](const auto& in) { return mean_absolute_error(in[0], in[1]); }, {t, plus(t, offsets)});
}

BOOST_AUTO_TEST_CASE(huber_gradients) {
    const Tensor t = random(Shape{3, 4}, 0.1f, 2.0f, 21);
    for (float delta : {1.0f, 0.5f, 10.0f}) // mixed sides, mostly linear, all quadratic
        check("huber " + std::to_string(delta), [delta](const auto& in) { return huber(in[0], in[1], delta); },
              {t, plus(t, offsets)});
}

BOOST_AUTO_TEST_CASE(binary_crossentropy_gradients) {
    // Soft targets in [0, 1]; logits of both signs.
    check("bce from logits", [](const auto& in) { return binary_crossentropy(in[0], in[1], true); },
          {random(Shape{3, 4}, 0.0f, 1.0f, 22, true), random(Shape{3, 4}, 0.1f, 3.0f, 23)});
    // Probabilities in [0.2, 0.8]: a step of 1e-2 stays far inside the clip [1e-7, 1 - 1e-7].
    check("bce from probabilities", [](const auto& in) { return binary_crossentropy(in[0], in[1], false); },
          {random(Shape{3, 4}, 0.0f, 1.0f, 24, true), random(Shape{3, 4}, 0.2f, 0.8f, 25, true)});
}

BOOST_AUTO_TEST_CASE(categorical_crossentropy_gradients) {
    // Soft targets whose rows do not sum to 1, so the Σy factor of the logits' gradient is exercised.
    check("cce from logits", [](const auto& in) { return categorical_crossentropy(in[0], in[1], true); },
          {random(Shape{4, 5}, 0.0f, 1.0f, 26, true), random(Shape{4, 5}, 0.1f, 3.0f, 27)});
    // Unnormalized probabilities in [0.1, 1]: the renormalized ones are ≥ 0.02, far from the clip.
    check("cce from probabilities", [](const auto& in) { return categorical_crossentropy(in[0], in[1], false); },
          {random(Shape{4, 5}, 0.0f, 1.0f, 28, true), random(Shape{4, 5}, 0.1f, 1.0f, 29, true)});
}

// By hand (exact binary fractions, so exact results); y_pred in float16, y_true in float32. An exact
// prediction (d = 0) gets no gradient: sign(0) = 0.
BOOST_AUTO_TEST_CASE(mean_absolute_error_values) {
    const Taped r = taped(floats(Shape{2, 2}, {1, 2, 3, 4}), floats(Shape{2, 2}, {1.5f, 2, 1, 6}, Dtype::float16),
                          [](const Tensor& t, const Tensor& p) { return mean_absolute_error(t, p); });
    BOOST_TEST(r.loss.flat(0) == (0.5f + 0 + 2 + 2) / 4);
    BOOST_TEST(r.g_pred == (std::vector<float>{0.25f, 0, -0.25f, 0.25f}), boost::test_tools::per_element());
    BOOST_TEST(r.g_true == (std::vector<float>{-0.25f, 0, 0.25f, -0.25f}), boost::test_tools::per_element());
}

// d = (0.5, -1, 2, -3): with δ = 1, ½d² for the first two (|d| = δ counts as inside) and δ(|d| - ½δ)
// beyond; with δ = 2.5 only the last is beyond. Exact binary fractions throughout.
BOOST_AUTO_TEST_CASE(huber_values) {
    const Tensor t = floats(Shape{4}, {1, 2, 3, 4}), p = floats(Shape{4}, {1.5f, 1, 5, 1});
    const auto with = [](float delta) {
        return [delta](const Tensor& a, const Tensor& b) { return huber(a, b, delta); };
    };
    const Taped one = taped(t, p, with(1.0f));
    BOOST_TEST(one.loss.flat(0) == (0.125f + 0.5f + 1.5f + 2.5f) / 4);
    BOOST_TEST(one.g_pred == (std::vector<float>{0.125f, -0.25f, 0.25f, -0.25f}), boost::test_tools::per_element());
    BOOST_TEST(one.g_true == (std::vector<float>{-0.125f, 0.25f, -0.25f, 0.25f}), boost::test_tools::per_element());
    const Taped wide = taped(t, p, with(2.5f));
    BOOST_TEST(wide.loss.flat(0) == (0.125f + 0.5f + 2 + 2.5f * (3 - 1.25f)) / 4);
    BOOST_TEST(wide.g_pred == (std::vector<float>{0.125f, -0.25f, 0.5f, -0.625f}), boost::test_tools::per_element());
    // The default δ is 1.
    BOOST_TEST(huber(t, p).flat(0) == one.loss.flat(0));
}

// Logits ±100 in float16: e^100 ≈ 2.7e43 overflows float32 (3.4e38), so only the stable form is finite.
BOOST_AUTO_TEST_CASE(binary_crossentropy_from_logits_values) {
    const std::vector<float> z{100, -100, 100, -100, 0, 3}, y{1, 0, 0, 1, 0.5f, 0.25f};
    const Taped r = taped(floats(Shape{2, 3}, y), floats(Shape{2, 3}, z, Dtype::float16),
                          [](const Tensor& t, const Tensor& p) { return binary_crossentropy(t, p, true); });
    const double tiny = std::log1p(std::exp(-100.0)); // the loss of a confident, right logit
    const double last = 3 - 0.75 + std::log1p(std::exp(-3.0));
    BOOST_TEST(std::isfinite(r.loss.flat(0)));
    BOOST_TEST(r.loss.flat(0) == (2 * tiny + 100 + 100 + std::log(2.0) + last) / 6,
               boost::test_tools::tolerance(f32_tol));
    // (σ(z) - y)/6, rounded to float16 (2^-11 relative; σ(-100)/6 ≈ 6e-45 underflows to 0).
    const double s3 = 1 / (1 + std::exp(-3.0));
    near(r.g_pred, {0, 0, 1.0 / 6, -1.0 / 6, 0, (s3 - 0.25) / 6}, 0x1p-11 + f32_tol);
    near(r.g_true, {-100.0 / 6, 100.0 / 6, -100.0 / 6, 100.0 / 6, 0, -3.0 / 6}, f32_tol);
}

// Probabilities 0 and 1 are clipped to ε and 1 - ε: a finite loss (two terms near -log ε ≈ 16) and no
// gradient to p there; elsewhere (q - y)/(q(1 - q))/6, e.g. (0.25/0.1875)/6 = 2/9.
BOOST_AUTO_TEST_CASE(binary_crossentropy_from_probabilities_values) {
    const std::vector<float> p{0, 1, 0.25f, 1, 0, 0.625f}, y{1, 0, 0, 1, 0, 0.3f};
    const Taped r = taped(floats(Shape{2, 3}, y), floats(Shape{2, 3}, p),
                          [](const Tensor& t, const Tensor& q) { return binary_crossentropy(t, q, false); });
    const double q[6] = {eps, one_minus_eps, 0.25, one_minus_eps, eps, 0.625};
    const bool kept[6] = {false, false, true, false, false, true};
    double sum = 0;
    std::vector<double> dp(6), dy(6);
    for (std::size_t i = 0; i < 6; ++i) {
        sum -= y[i] * std::log(q[i]) + (1 - y[i]) * std::log1p(-q[i]);
        dp[i] = kept[i] ? (q[i] - y[i]) / (q[i] * (1 - q[i])) / 6 : 0;
        dy[i] = (std::log1p(-q[i]) - std::log(q[i])) / 6;
    }
    BOOST_TEST(std::isfinite(r.loss.flat(0)));
    BOOST_TEST(r.loss.flat(0) == sum / 6, boost::test_tools::tolerance(f32_tol));
    BOOST_TEST(dp[2] == 2.0 / 9, boost::test_tools::tolerance(1e-12));
    near(r.g_pred, dp, f32_tol);
    near(r.g_true, dy, f32_tol);
}

// Float16 logits ±100 (row 0, one-hot) and a uniform row against soft targets summing to 1.5 (row 1):
// softmax = 1/3, loss 1.5 ln 3, gradient (1.5/3 - y)/2.
BOOST_AUTO_TEST_CASE(categorical_crossentropy_from_logits_values) {
    const std::vector<float> z{100, -100, 0, 1, 1, 1}, y{0, 1, 0, 0.25f, 0.25f, 1};
    const Taped r = taped(floats(Shape{2, 3}, y), floats(Shape{2, 3}, z, Dtype::float16),
                          [](const Tensor& t, const Tensor& p) { return categorical_crossentropy(t, p, true); });
    const double lse0 = 100 + std::log1p(std::exp(-200.0) + std::exp(-100.0));
    BOOST_TEST(std::isfinite(r.loss.flat(0)));
    BOOST_TEST(r.loss.flat(0) == ((lse0 + 100) + 1.5 * std::log(3.0)) / 2, boost::test_tools::tolerance(f32_tol));
    // Rounded to float16 (2^-11 relative); e^-100/2 underflows to 0.
    near(r.g_pred, {0.5, -0.5, 0, 0.125, 0.125, -0.25}, 0x1p-11 + f32_tol);
    // -log q / 2: row 0 is (0, 200, 100) / 2 (log q₀ = -log(1 + e^-100) rounds to 0 in float32).
    near(r.g_true, {0, 100, 50, std::log(3.0) / 2, std::log(3.0) / 2, std::log(3.0) / 2}, f32_tol);
}

// Row 0 (2, 6, 0) renormalizes to (0.25, 0.75, 0); row 1 (0, 0, 1) is clipped everywhere. With the label on
// a 0, the loss is -log ε ≈ 16.1, finite. The gradient flows through the row sum s: row 0 is
// (Σ_kept y - [kept] y/r) / (2s) = (1, 1 - 4/3, 1) / 16; row 1 keeps no entry, so it gets none.
BOOST_AUTO_TEST_CASE(categorical_crossentropy_from_probabilities_values) {
    const std::vector<float> p{2, 6, 0, 0, 0, 1}, y{0, 1, 0, 1, 0, 0};
    const Taped r = taped(floats(Shape{2, 3}, y), floats(Shape{2, 3}, p),
                          [](const Tensor& t, const Tensor& q) { return categorical_crossentropy(t, q, false); });
    BOOST_TEST(std::isfinite(r.loss.flat(0)));
    BOOST_TEST(r.loss.flat(0) == (-std::log(0.75) - std::log(eps)) / 2, boost::test_tools::tolerance(f32_tol));
    near(r.g_pred, {1.0 / 16, -1.0 / 48, 1.0 / 16, 0, 0, 0}, f32_tol);
    near(r.g_true,
         {-std::log(0.25) / 2, -std::log(0.75) / 2, -std::log(eps) / 2, -std::log(eps) / 2, -std::log(eps) / 2,
          -std::log(one_minus_eps) / 2},
         f32_tol);
    // Renormalization: (1, 3) is the same prediction as (0.25, 0.75).
    const Tensor t1 = floats(Shape{1, 2}, {0, 1});
    BOOST_TEST(categorical_crossentropy(t1, floats(Shape{1, 2}, {1, 3}), false).flat(0) ==
                   categorical_crossentropy(t1, floats(Shape{1, 2}, {0.25f, 0.75f}), false).flat(0),
               boost::test_tools::tolerance(f32_tol));
}

// Whatever the inputs' dtype, the loss is a float32 scalar and each gradient has its input's dtype; with
// only y_pred watched, y_pred still gets its gradient.
BOOST_AUTO_TEST_CASE(new_losses_are_float32_scalars) {
    using Loss = std::function<Tensor(const Tensor&, const Tensor&)>;
    const std::vector<std::pair<const char*, Loss>> losses{
        {"mae", [](const Tensor& t, const Tensor& p) { return mean_absolute_error(t, p); }},
        {"huber", [](const Tensor& t, const Tensor& p) { return huber(t, p, 0.5f); }},
        {"bce logits", [](const Tensor& t, const Tensor& p) { return binary_crossentropy(t, p, true); }},
        {"bce probabilities", [](const Tensor& t, const Tensor& p) { return binary_crossentropy(t, p, false); }},
        {"cce logits", [](const Tensor& t, const Tensor& p) { return categorical_crossentropy(t, p, true); }},
        {"cce probabilities", [](const Tensor& t, const Tensor& p) { return categorical_crossentropy(t, p, false); }}};
    for (Dtype d : {Dtype::float16, Dtype::bfloat16})
        for (const auto& [name, f] : losses) {
            BOOST_TEST_CONTEXT(name << " " << name_of(d)) {
                const Tensor t = random(Shape{3, 4}, 0.0f, 1.0f, 30, true).to(d);
                const Tensor p = random(Shape{3, 4}, 0.2f, 0.8f, 31, true).to(d);
                const Taped r = taped(t, p, f);
                BOOST_TEST(r.loss.dtype() == Dtype::float32);
                BOOST_TEST(r.loss.rank() == 0u);
                BOOST_TEST(std::isfinite(r.loss.flat(0)));
                GradientTape tape;
                tape.watch(p);
                const Tensor g = tape.gradient(f(t, p), {p})[0];
                BOOST_TEST(g.dtype() == d);
                BOOST_TEST(g.to_floats() == r.g_pred, boost::test_tools::per_element());
            }
        }
}

BOOST_AUTO_TEST_CASE(new_losses_errors) {
    const Tensor a(Shape{2, 3}), b(Shape{3, 2}), empty(Shape{0}), flat(Shape{6}), cube(Shape{1, 2, 3});
    BOOST_TEST(
        (throws_with<shape_error>([&] { mean_absolute_error(a, b); }, {"mean_absolute_error", "(2, 3)", "(3, 2)"})));
    BOOST_TEST((throws_with<shape_error>([&] { huber(a, b); }, {"huber", "(2, 3)", "(3, 2)"})));
    BOOST_TEST((throws_with<shape_error>([&] { binary_crossentropy(b, a, true); }, {"(3, 2)", "(2, 3)"})));
    BOOST_TEST((throws_with<shape_error>([&] { binary_crossentropy(a, b, false); }, {"(2, 3)", "(3, 2)"})));
    BOOST_TEST((throws_with<shape_error>([&] { categorical_crossentropy(a, b, true); }, {"(2, 3)", "(3, 2)"})));
    BOOST_TEST((throws_with<shape_error>([&] { categorical_crossentropy(a, b, false); }, {"(2, 3)", "(3, 2)"})));
    BOOST_TEST((throws_with<shape_error>([&] { mean_absolute_error(empty, empty); }, {"(0)", "non-empty"})));
    BOOST_TEST((throws_with<shape_error>([&] { huber(empty, empty); }, {"(0)"})));
    BOOST_TEST((throws_with<shape_error>([&] { binary_crossentropy(empty, empty, true); }, {"(0)"})));
    // Categorical: rank 2, non-empty, even when the shapes agree.
    BOOST_TEST((throws_with<shape_error>([&] { categorical_crossentropy(flat, flat, true); },
                                         {"categorical_crossentropy", "(6)", "(batch, classes)"})));
    BOOST_TEST((throws_with<shape_error>([&] { categorical_crossentropy(cube, cube, false); }, {"(1, 2, 3)"})));
    const Tensor none(Shape{0, 5});
    BOOST_TEST((throws_with<shape_error>([&] { categorical_crossentropy(none, none, true); }, {"(0, 5)"})));
    BOOST_TEST((throws_with<shape_error>([&] { categorical_crossentropy(flat, a, true); }, {"(6)", "(2, 3)"})));
    // Huber's δ must be positive and finite.
    for (float delta : {0.0f, -1.0f, std::nanf(""), std::numeric_limits<float>::infinity()})
        BOOST_TEST((throws_with<std::invalid_argument>([&] { huber(a, a, delta); }, {"huber", "delta"})));
}
