#define BOOST_TEST_MODULE ops_loss
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"

#include <cmath>
#include <random>

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
