#define BOOST_TEST_MODULE ops_reduce
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace mixprec::autodiff;
namespace tt = boost::test_tools;

namespace {

/// Uniform values in ±[lo, hi].
Tensor random(const Shape& shape, unsigned seed, float lo = 0.1f, float hi = 2.0f) {
    return op_checks::uniform(shape, lo, hi, seed);
}

/// Distinct values 0.1 k - 1 in shuffled order: no two within 0.1, so max has no ties and the
/// finite-difference step (h ≤ 0.02 here) never crosses from one maximum to another.
Tensor spaced(const Shape& shape, unsigned seed) {
    std::vector<float> v(shape.elements());
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = 0.1f * static_cast<float>(k) - 1.0f;
    std::shuffle(v.begin(), v.end(), std::mt19937(seed));
    return Tensor::from_floats(shape, v);
}

/// 1, 2, 3, ... in `dtype`.
Tensor counting(const Shape& shape, Dtype dtype = Dtype::float32) {
    std::vector<float> v(shape.elements());
    std::iota(v.begin(), v.end(), 1.0f);
    return Tensor::from_floats(shape, v, dtype);
}

// Tolerances of the half-precision checks, relative to the largest gradient. sum, mean and max pass
// dy through (divided by n or the tie count) with one rounding; softmax and log_softmax compute dx in
// float32 from the rounded inputs, the rounded weights dy and Σ dy y, and round once: a few units of
// rounding in all. 8 units (as for the elementwise ops) leaves room.
constexpr double f16_tol = 8 * 0x1p-11, bf16_tol = 8 * 0x1p-8;

void check(const std::string& name, const Function& f, const std::vector<Tensor>& inputs) {
    op_checks::check_gradients(name, f, inputs, f16_tol, bf16_tol);
}

using reduction = Tensor (*)(const Tensor&, std::vector<int>, bool);

struct Case {
    Shape shape;
    std::vector<int> axes;
    bool keepdims;
};

const std::vector<Case> cases{
    {Shape{}, {}, false},
    {Shape{}, {}, true},
    {Shape{5}, {}, false},
    {Shape{5}, {-1}, true},
    {Shape{3, 4}, {1}, false},
    {Shape{3, 4}, {0}, true},
    {Shape{2, 3, 4}, {}, true},
    {Shape{2, 3, 4}, {-1}, false},
    {Shape{2, 3, 4}, {0, 2}, false},
    {Shape{2, 3, 4}, {2, -3}, true},
    {Shape{2, 3, 4}, {1}, true},
};

std::string describe(const std::string& op, const Case& c) {
    std::string axes;
    for (int a : c.axes) {
        if (!axes.empty()) axes += ',';
        axes += std::to_string(a);
    }
    return op + " " + c.shape.to_string() + " axes {" + axes + "}" + (c.keepdims ? " keepdims" : "");
}

std::vector<float> floats(const Tensor& t) { return t.to_floats(); }

void check_close(const std::vector<float>& got, const std::vector<float>& want, float tol) {
    BOOST_TEST_REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
        BOOST_TEST(std::fabs(got[i] - want[i]) <= tol, "element " << i << ": " << got[i] << " vs " << want[i]);
}

template <class F>
void expect_shape_error(F f, std::initializer_list<const char*> parts) {
    try {
        f();
        BOOST_ERROR("no shape_error thrown");
    } catch (const shape_error& e) {
        const std::string message = e.what();
        for (const char* part : parts)
            BOOST_TEST(message.find(part) != std::string::npos, message << " lacks " << part);
    }
}

} // namespace

BOOST_AUTO_TEST_CASE(reductions_forward_values_and_shapes) {
    const Tensor x = counting(Shape{2, 3}); // [[1 2 3] [4 5 6]]
    BOOST_TEST(sum(x).shape() == Shape{});
    BOOST_TEST(sum(x).flat(0) == 21.0f);
    BOOST_TEST(sum(x, {}, true).shape() == (Shape{1, 1}));
    BOOST_TEST(floats(sum(x, {0})) == (std::vector<float>{5, 7, 9}), tt::per_element());
    BOOST_TEST(floats(sum(x, {-1}, true)) == (std::vector<float>{6, 15}), tt::per_element());
    BOOST_TEST(sum(x, {-1}, true).shape() == (Shape{2, 1}));
    BOOST_TEST(floats(mean(x, {1})) == (std::vector<float>{2, 5}), tt::per_element());
    BOOST_TEST(mean(x).flat(0) == 3.5f);
    BOOST_TEST(floats(max(x, {0})) == (std::vector<float>{4, 5, 6}), tt::per_element());
    BOOST_TEST(max(x).flat(0) == 6.0f);
    BOOST_TEST(sum(Tensor::full(Shape{}, 2.5f)).flat(0) == 2.5f);
    BOOST_TEST(std::isnan(max(Tensor::from_floats(Shape{3}, std::vector<float>{1, NAN, 2})).flat(0)));
    BOOST_TEST(sum(counting(Shape{2, 3}, Dtype::float16), {0}).dtype() == Dtype::float16);
}

// Sums accumulate wide and round once to the dtype: 4097 float16 ones sum to 4097 before rounding (a
// float16 accumulator would stick at 2048), and 1 + 2^-11 + 2^-24 (all float16 values) lies just above
// the float16 midpoint 1 + 2^-11, so it rounds up to 1 + 2^-10; rounding it to float32 first would give
// the midpoint itself, which ties to even: 1.
BOOST_AUTO_TEST_CASE(sums_accumulate_wide_and_round_once) {
    const Tensor ones = Tensor::full(Shape{4097}, 1.0f, Dtype::float16);
    BOOST_TEST(sum(ones.to(Dtype::float32)).flat(0) == 4097.0f);
    BOOST_TEST(sum(ones).flat(0) == 4096.0f); // float16 spacing is 4 there
    const Tensor tenths = Tensor::full(Shape{3}, 0.1f, Dtype::float16);
    BOOST_TEST(sum(tenths).flat(0) == float(float16(3.0f * tenths.flat(0)))); // 3 · an 11-bit value: exact in float32
    BOOST_TEST(mean(Tensor::full(Shape{3}, 0.1f, Dtype::bfloat16)).flat(0) == float(bfloat16(0.1f)));
    const Tensor parts = Tensor::from_floats(Shape{3}, std::vector<float>{1.0f, 0x1p-11f, 0x1p-24f}, Dtype::float16);
    BOOST_TEST(sum(parts).flat(0) == 1.0f + 0x1p-10f);
    BOOST_TEST(sum(parts.to(Dtype::float32)).flat(0) == 1.0f + 0x1p-11f);
}

BOOST_AUTO_TEST_CASE(reduction_gradients) {
    unsigned seed = 100;
    for (const Case& c : cases) {
        const auto at = [c](reduction op) { return [c, op](const auto& in) { return op(in[0], c.axes, c.keepdims); }; };
        check(describe("sum", c), at(sum), {random(c.shape, ++seed)});
        check(describe("mean", c), at(mean), {random(c.shape, ++seed)});
        check(describe("max", c), at(max), {spaced(c.shape, ++seed)});
    }
}

// Ties: every maximal element gets an equal share of dy.
BOOST_AUTO_TEST_CASE(max_ties_share_the_gradient_equally) {
    const Tensor x = Tensor::from_floats(Shape{2, 4}, std::vector<float>{1, 3, 3, 2, 5, 5, 5, 0});
    GradientTape tape;
    tape.watch(x);
    const Tensor g = tape.gradient(max(x, {-1}), {x})[0];
    BOOST_TEST(floats(g) == (std::vector<float>{0, 0.5f, 0.5f, 0, 1.0f / 3, 1.0f / 3, 1.0f / 3, 0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(softmax_forward_values) {
    const Tensor x = Tensor::from_floats(Shape{2, 2}, std::vector<float>{0, 0, 1, 2});
    const float e = std::exp(1.0f);
    check_close(floats(softmax(x)), {0.5f, 0.5f, 1 / (1 + e), e / (1 + e)}, 1e-6f);
    check_close(floats(softmax(x, 0)), {1 / (1 + e), 1 / (1 + e * e), e / (1 + e), e * e / (1 + e * e)}, 1e-6f);
    check_close(floats(log_softmax(x)), {-std::log(2.0f), -std::log(2.0f), -std::log(1 + e), 1 - std::log(1 + e)},
                1e-6f);

    // Large inputs: exp(1000) overflows every format, but exp(x - max) does not.
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
        const Tensor big = Tensor::from_floats(Shape{2}, std::vector<float>{1000, 1001}, dtype);
        const Tensor y = softmax(big), l = log_softmax(big);
        BOOST_TEST(y.dtype() == dtype);
        const float d = std::exp(big.flat(1) - big.flat(0)); // e, except in bfloat16, where 1001 rounds to 1000
        const float p0 = 1 / (1 + d), p1 = d / (1 + d);
        const double tol = dtype == Dtype::float32 ? 1e-6 : dtype == Dtype::float16 ? 0x1p-11 : 0x1p-8;
        BOOST_TEST(std::isfinite(y.flat(0)));
        BOOST_TEST(std::isfinite(y.flat(1)));
        BOOST_TEST(std::fabs(y.flat(0) - p0) <= tol * p0, name_of(dtype) << " " << y.flat(0));
        BOOST_TEST(std::fabs(y.flat(1) - p1) <= tol * p1, name_of(dtype) << " " << y.flat(1));
        BOOST_TEST(std::fabs(l.flat(0) - std::log(p0)) <= 2 * tol, name_of(dtype) << " " << l.flat(0));
        BOOST_TEST(std::fabs(l.flat(1) - std::log(p1)) <= 2 * tol, name_of(dtype) << " " << l.flat(1));
    }
}

BOOST_AUTO_TEST_CASE(softmax_gradients) {
    const std::vector<std::pair<Shape, int>> cases{{Shape{5}, -1},      {Shape{5}, 0},       {Shape{3, 4}, -1},
                                                   {Shape{3, 4}, 0},    {Shape{2, 3, 4}, 1}, {Shape{2, 3, 4}, -1},
                                                   {Shape{2, 3, 4}, -3}};
    unsigned seed = 200;
    for (const auto& [shape, axis] : cases) {
        const std::string where = shape.to_string() + " axis " + std::to_string(axis);
        check("softmax " + where, [axis](const auto& in) { return softmax(in[0], axis); }, {random(shape, ++seed)});
        check("log_softmax " + where, [axis](const auto& in) { return log_softmax(in[0], axis); },
              {random(shape, ++seed)});
    }
    // Composites: the gradient of a cross-entropy-like chain, and softmax of a large-magnitude input.
    check("sum of log_softmax rows", [](const auto& in) { return sum(log_softmax(in[0]), {-1}); },
          {random(Shape{3, 4}, 220)});
    check("softmax of large inputs", [](const auto& in) { return softmax(in[0]); },
          {random(Shape{2, 3}, 221, 50.0f, 52.0f)});
}

BOOST_AUTO_TEST_CASE(shape_errors_name_the_axes_and_shapes) {
    const Tensor x = counting(Shape{2, 3});
    expect_shape_error([&] { sum(x, {2}); }, {"axis 2", "(2)", "(2, 3)"});
    expect_shape_error([&] { mean(x, {-3}); }, {"axis -3", "(2, 3)"});
    expect_shape_error([&] { max(x, {1, -1}); }, {"axis -1", "(1, -1)", "(2, 3)"});
    expect_shape_error([&] { sum(Tensor(), {0}); }, {"axis 0", "()"});
    expect_shape_error([&] { max(Tensor(Shape{2, 0}), {1}); }, {"(1)", "(2, 0)"});
    expect_shape_error([&] { softmax(x, 2); }, {"softmax", "axis 2", "(2, 3)"});
    expect_shape_error([&] { log_softmax(Tensor(), -1); }, {"log_softmax", "axis -1", "()"});
}

// argmax: one index per position of the other axes, row-major; the first on ties; the first NaN when
// there is one (so that x at the index is max(x)); integers, not a Tensor, and nothing recorded.
BOOST_AUTO_TEST_CASE(argmax_indices_ties_and_nan) {
    using indices = std::vector<std::int64_t>;
    const Tensor logits = Tensor::from_floats(Shape{3, 4}, std::vector<float>{0.5f, 2, -1, 2,    //
                                                                              -3, -2, -5, -2.5f, //
                                                                              1, 1, 1, 1});
    BOOST_TEST(argmax(logits) == (indices{1, 1, 0}), tt::per_element()); // ties: the first
    BOOST_TEST(argmax(logits, 1) == argmax(logits), tt::per_element());
    BOOST_TEST(argmax(logits, 0) == (indices{2, 0, 2, 0}), tt::per_element());
    BOOST_TEST(argmax(logits, -2) == argmax(logits, 0), tt::per_element());

    // (2, 3, 2) along axis 1: [i * 2 + k] is the index of the largest of x[i, :, k].
    const Tensor cube =
        Tensor::from_floats(Shape{2, 3, 2}, std::vector<float>{1, 6, 5, 2, 3, 4, 9, 0, 7, 8, 9, 1}, Dtype::bfloat16);
    BOOST_TEST(argmax(cube, 1) == (indices{1, 0, 0, 1}), tt::per_element());
    BOOST_TEST(argmax(cube, -1) == (indices{1, 0, 1, 0, 1, 0}), tt::per_element());
    BOOST_TEST(argmax(counting(Shape{5}, Dtype::float16)) == (indices{4}), tt::per_element());

    const Tensor special = Tensor::from_floats(Shape{4, 3}, std::vector<float>{-INFINITY, -INFINITY, -INFINITY, 1, NAN,
                                                                               NAN, NAN, 5, 1, 2, INFINITY, INFINITY});
    BOOST_TEST(argmax(special) == (indices{0, 1, 0, 1}), tt::per_element());
    const std::vector<float> top = max(special, {-1}).to_floats();
    BOOST_TEST(std::isnan(top[1])); // the index points at max's answer: NaN
    BOOST_TEST(std::isnan(special.at({1, std::size_t(argmax(special)[1])})));
    BOOST_TEST(argmax(Tensor(Shape{0, 3})).empty());

    GradientTape tape;
    tape.watch(logits);
    (void)argmax(logits);
    BOOST_TEST(tape.recorded_ops() == 0u);

    expect_shape_error([&] { argmax(logits, 2); }, {"argmax", "axis 2", "(3, 4)"});
    expect_shape_error([&] { argmax(Tensor()); }, {"argmax", "axis -1", "()"});
    expect_shape_error([&] { argmax(Tensor(Shape{2, 0})); }, {"argmax", "axis -1", "(2, 0)", "length 0"});
}
