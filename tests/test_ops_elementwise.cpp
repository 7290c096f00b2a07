#define BOOST_TEST_MODULE ops_elementwise
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"
#include <mixprec/autodiff/tensor/detail/vector_math.hpp>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

using namespace mixprec::autodiff;

namespace {

Tensor random(const Shape& shape, float lo, float hi, unsigned seed, bool positive = false) {
    return op_checks::uniform(shape, lo, hi, seed, positive);
}

// Tolerances of the half-precision checks: each op rounds its result and its gradient once in the
// format (relative error ≤ 2^-11 for float16, 2^-8 for bfloat16), and a gradient may combine two or
// three such roundings, so allow about 8 units of rounding, relative to the largest gradient.
constexpr double f16_tol = 8 * 0x1p-11, bf16_tol = 8 * 0x1p-8;

void check(const std::string& name, const Function& f, const std::vector<Tensor>& inputs) {
    op_checks::check_gradients(name, f, inputs, f16_tol, bf16_tol);
}

using unary = Tensor (*)(const Tensor&);

} // namespace

BOOST_AUTO_TEST_CASE(unary_ops) {
    const Tensor any = random(Shape{3, 4}, 0.1f, 2.0f, 1), positive = random(Shape{3, 4}, 0.2f, 2.0f, 2, true);
    const std::vector<std::pair<std::string, unary>> everywhere{
        {"neg", neg},   {"exp", exp},   {"square", square},   {"abs", abs},
        {"relu", relu}, {"tanh", tanh}, {"sigmoid", sigmoid}, {"gelu", gelu}};
    for (const auto& [name, op] : everywhere) check(name, [op](const auto& in) { return op(in[0]); }, {any});
    check("log", [](const auto& in) { return log(in[0]); }, {positive});
    check("sqrt", [](const auto& in) { return sqrt(in[0]); }, {positive});
    check("pow 2.5", [](const auto& in) { return pow(in[0], 2.5f); }, {positive});
    check("pow -1", [](const auto& in) { return pow(in[0], -1.0f); }, {positive});
    check("scale", [](const auto& in) { return scale(in[0], -3.0f); }, {any});
    check("leaky_relu", [](const auto& in) { return leaky_relu(in[0], 0.1f); }, {any});
}

BOOST_AUTO_TEST_CASE(binary_ops_with_broadcasting) {
    const std::vector<std::pair<Shape, Shape>> shapes{
        {Shape{2, 3}, Shape{2, 3}}, {Shape{2, 3}, Shape{3}}, {Shape{4, 1, 3}, Shape{2, 1}}, {Shape{}, Shape{2, 2}}};
    unsigned seed = 10;
    for (const auto& [sa, sb] : shapes) {
        const Tensor a = random(sa, 0.2f, 2.0f, ++seed), b = random(sb, 0.5f, 2.0f, ++seed);
        check("add", [](const auto& in) { return in[0] + in[1]; }, {a, b});
        check("sub", [](const auto& in) { return in[0] - in[1]; }, {a, b});
        check("mul", [](const auto& in) { return in[0] * in[1]; }, {a, b});
        check("div", [](const auto& in) { return in[0] / in[1]; }, {a, b});
    }
}

BOOST_AUTO_TEST_CASE(matmul_all_layouts) {
    unsigned seed = 40;
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            const MatmulOptions o{.transpose_a = ta, .transpose_b = tb};
            const auto f = [o](const auto& in) { return matmul(in[0], in[1], o); };
            const std::string name = std::string("matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0");
            check(name, f,
                  {random(ta ? Shape{4, 3} : Shape{3, 4}, 0.1f, 1.0f, ++seed),
                   random(tb ? Shape{5, 4} : Shape{4, 5}, 0.1f, 1.0f, ++seed)});
            check(name + " batched", f,
                  {random(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 0.1f, 1.0f, ++seed),
                   random(tb ? Shape{2, 5, 4} : Shape{2, 4, 5}, 0.1f, 1.0f, ++seed)});
            check(name + " shared b", f,
                  {random(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 0.1f, 1.0f, ++seed),
                   random(tb ? Shape{5, 4} : Shape{4, 5}, 0.1f, 1.0f, ++seed)});
        }
}

// cast: the values round to the target dtype; the gradient comes back in the source dtype.
BOOST_AUTO_TEST_CASE(cast_between_dtypes) {
    const Tensor x = random(Shape{5}, 0.1f, 2.0f, 60);
    check("cast to float32", [](const auto& in) { return cast(in[0], Dtype::float32); }, {x});
    GradientTape tape;
    tape.watch(x);
    const Tensor y = cast(x, Dtype::float16);
    BOOST_TEST(y.dtype() == Dtype::float16);
    const Tensor g = tape.gradient(square(y), {x})[0];
    BOOST_TEST(g.dtype() == Dtype::float32);
    for (std::size_t i = 0; i < 5; ++i) BOOST_TEST(g.flat(i) == float(float16(2.0f * y.flat(i))));
}

// The gradcheck itself fails on a wrong backward (a scale op whose recorded derivative is off).
BOOST_AUTO_TEST_CASE(gradcheck_catches_a_wrong_backward) {
    const auto wrong = [](const std::vector<Tensor>& in) {
        Tensor y = kernels::scale(in[0], 2.0f);
        if (should_record({&in[0]}))
            record(y, {&in[0]}, [](const Tensor& dy) { return Gradients{kernels::scale(dy, 2.1f)}; });
        return y;
    };
    BOOST_TEST(!gradcheck(wrong, {random(Shape{3}, 0.5f, 1.0f, 70)}).passed);
}

// dense: gradients for x (2-D and 3-D), w and bias; and the bias is added before the one rounding, so
// a float16 dense equals round(float32 product + bias) exactly.
BOOST_AUTO_TEST_CASE(dense_layer) {
    const auto with_bias = [](const auto& in) { return dense(in[0], in[1], in[2]); };
    check("dense", with_bias,
          {random(Shape{3, 4}, 0.1f, 1.0f, 80), random(Shape{4, 5}, 0.1f, 1.0f, 81), random(Shape{5}, 0.1f, 1.0f, 82)});
    check("dense 3-D", with_bias,
          {random(Shape{2, 3, 4}, 0.1f, 1.0f, 83), random(Shape{4, 5}, 0.1f, 1.0f, 84),
           random(Shape{5}, 0.1f, 1.0f, 85)});
    check("dense without bias", [](const auto& in) { return dense(in[0], in[1]); },
          {random(Shape{3, 4}, 0.1f, 1.0f, 86), random(Shape{4, 2}, 0.1f, 1.0f, 87)});

    const Tensor x = random(Shape{8, 16}, 0.1f, 1.0f, 88), w = random(Shape{16, 4}, 0.1f, 1.0f, 89),
                 b = random(Shape{4}, 0.1f, 1.0f, 90);
    const Tensor x16 = x.to(Dtype::float16), w16 = w.to(Dtype::float16), b16 = b.to(Dtype::float16);
    const Tensor once =
        kernels::add(kernels::matmul(x16.to(Dtype::float32), w16.to(Dtype::float32)), b16.to(Dtype::float32))
            .to(Dtype::float16);
    const Tensor y = dense(x16, w16, b16);
    BOOST_TEST(y.dtype() == Dtype::float16);
    for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(y.flat(i) == once.flat(i));
    BOOST_CHECK_THROW(dense(x, w, random(Shape{5}, 0.1f, 1.0f, 91)), shape_error);
    BOOST_CHECK_THROW(dense(x, random(Shape{2, 16, 4}, 0.1f, 1.0f, 92)), shape_error);
}

namespace {

/// |y − ref| in units of float32's spacing at ref (2^(e−23) for ref in [2^e, 2^(e+1)), the subnormal
/// spacing 2^-149 below FLT_MIN): the error of a float32 result against a double-precision reference. 0
/// when both are NaN or the same infinity (also when ref overflows float32 and y is that infinity); +inf
/// when only one of them is NaN or infinite.
double ulp_error(float y, double ref) {
    const float rounded = static_cast<float>(ref);
    if (std::isnan(ref) || std::isnan(y)) return std::isnan(ref) && std::isnan(y) ? 0.0 : HUGE_VAL;
    if (std::isinf(rounded) || std::isinf(y)) return y == rounded ? 0.0 : HUGE_VAL;
    const auto exponent = static_cast<std::int64_t>((std::bit_cast<std::uint64_t>(ref) >> 52) & 0x7ff) - 1023;
    const std::int64_t spacing = std::max<std::int64_t>(exponent - 23, -149); // log2 of the spacing
    return std::fabs(double(y) - ref) * std::bit_cast<double>(static_cast<std::uint64_t>(1023 - spacing) << 52);
}

/// The worst error seen so far and the input that gave it.
struct WorstError {
    double ulps = 0.0;
    float at = 0.0f;
    void add(float x, float y, double ref) {
        const double e = ulp_error(y, ref);
        if (!(e <= ulps)) ulps = e, at = x;
    }
};

/// Calls check(batch) on the inputs of the accuracy sweep, a million at a time: every 61st float32 bit
/// pattern of magnitude in [2^-12, 128), where the polynomials, the switch to exp and all of exp's
/// nontrivial results lie, and every 1021st of the others (NaNs, infinities, subnormals, tiny and huge
/// magnitudes); then the special values and every float within 2048 patterns of the places where the
/// functions change method or saturate, with both signs.
template <class Check>
void for_each_sweep_batch(Check check) {
    std::vector<float> batch;
    const auto push = [&](float x) {
        batch.push_back(x);
        if (batch.size() == (std::size_t{1} << 20)) check(batch), batch.clear();
    };
    for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32);) {
        const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
        push(x);
        bits += std::fabs(x) >= 0x1p-12f && std::fabs(x) < 128.0f ? 61 : 1021;
    }
    constexpr float inf = std::numeric_limits<float>::infinity();
    for (float x : {0.0f, inf, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
                    std::numeric_limits<float>::denorm_min(), 0x1p-140f, 0x1.fffffcp-127f, FLT_MIN, FLT_MAX, 1.0f})
        push(x), push(-x);
    // tanh's switch from polynomial to exp; exp's clamps, overflow (ln FLT_MAX), subnormal (ln FLT_MIN)
    // and underflow (ln 2^-150) boundaries; where tanh and sigmoid round to 1.
    for (float edge : {0.75f, 89.0f, 104.0f, 88.72284f, 87.33655f, 103.97208f, 9.0109f, 17.32868f})
        for (std::int32_t d = -2048; d <= 2048; ++d)
            for (float sign : {1.0f, -1.0f}) push(sign * std::bit_cast<float>(std::bit_cast<std::int32_t>(edge) + d));
    check(batch);
}

namespace vector_math = mixprec::autodiff::detail;

std::vector<float> apply(Tensor (*kernel)(const Tensor&), const std::vector<float>& x) {
    return kernel(Tensor::from_floats(Shape{x.size()}, x)).to_floats();
}

/// σ(x) in double from e = e^x (1/e^x is within 2^-52 of e^-x, far below float32's precision).
double sigmoid_from_exp(double x, double e) { return x >= 0 ? 1.0 / (1.0 + 1.0 / e) : e / (1.0 + e); }

} // namespace

// The branch-free exp, tanh and sigmoid of autodiff/tensor/detail/vector_math.hpp against double precision, within
// 2 ulp: sigmoid through its kernel (so in the vectorized clone this CPU runs), exp and tanh called
// directly (gelu_uses_the_vector_tanh ties them to the library). Over all 2^32 inputs their worst errors
// are 1.02 (tanh), 0.78 (exp) and 1.17 (sigmoid) ulp; this is a sample of that sweep (9 million inputs).
BOOST_AUTO_TEST_CASE(vector_math_accuracy) {
    WorstError tanh_error, exp_error, sigmoid_error;
    for_each_sweep_batch([&](const std::vector<float>& x) {
        const std::vector<float> s = apply(kernels::sigmoid, x);
        std::vector<float> t(x.size()), e(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) t[i] = vector_math::tanh(x[i]);
        for (std::size_t i = 0; i < x.size(); ++i) e[i] = vector_math::exp(x[i]);
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double v = x[i], exp_v = std::exp(v);
            tanh_error.add(x[i], t[i], std::tanh(v));
            exp_error.add(x[i], e[i], exp_v);
            sigmoid_error.add(x[i], s[i], sigmoid_from_exp(v, exp_v));
        }
    });
    BOOST_TEST(tanh_error.ulps <= 2.0, "tanh: " << tanh_error.ulps << " ulp at " << tanh_error.at);
    BOOST_TEST(exp_error.ulps <= 2.0, "exp: " << exp_error.ulps << " ulp at " << exp_error.at);
    BOOST_TEST(sigmoid_error.ulps <= 2.0, "sigmoid: " << sigmoid_error.ulps << " ulp at " << sigmoid_error.at);
    BOOST_TEST_MESSAGE("worst errors: tanh " << tanh_error.ulps << ", exp " << exp_error.ulps << ", sigmoid "
                                             << sigmoid_error.ulps << " ulp");

    // The special values exactly: NaN propagates, the infinities give the limits, −0 keeps its sign.
    constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> x{nan, inf, -inf, -0.0f, 0.0f, 0x1p-149f, 100.0f, -100.0f};
    std::vector<float> t;
    for (float v : x) t.push_back(vector_math::tanh(v));
    const std::vector<float> s = apply(kernels::sigmoid, x);
    BOOST_TEST(std::isnan(t[0]));
    BOOST_TEST(std::isnan(s[0]));
    BOOST_TEST(std::isnan(vector_math::exp(nan)));
    BOOST_TEST(t[1] == 1.0f);
    BOOST_TEST(t[2] == -1.0f);
    BOOST_TEST((t[3] == 0.0f && std::signbit(t[3])));
    BOOST_TEST((t[4] == 0.0f && !std::signbit(t[4])));
    BOOST_TEST(t[5] == 0x1p-149f);
    BOOST_TEST(t[6] == 1.0f);
    BOOST_TEST(t[7] == -1.0f);
    BOOST_TEST(s[1] == 1.0f);
    BOOST_TEST(s[2] == 0.0f);
    BOOST_TEST(s[3] == 0.5f);
    BOOST_TEST(s[6] == 1.0f);
    BOOST_TEST(s[7] == float(sigmoid_from_exp(-100.0, std::exp(-100.0))));
    BOOST_TEST(vector_math::exp(inf) == inf);
    BOOST_TEST(vector_math::exp(-inf) == 0.0f);
    BOOST_TEST(vector_math::exp(0.0f) == 1.0f);
    BOOST_TEST(vector_math::exp(89.0f) == inf);
    BOOST_TEST(vector_math::exp(-104.0f) == 0.0f);
}

// GELU forward and backward (the library's vectorized clone for this CPU) give the bits of their formulas
// evaluated here with vector_math.hpp's tanh: every clone rounds like the scalar x86-64 code (no FMA
// contraction), so the accuracy sweep above covers the tanh that gelu uses.
BOOST_AUTO_TEST_CASE(gelu_uses_the_vector_tanh) {
    constexpr float k = 0.7978845608028654f, c = 0.044715f;
    std::vector<float> u;
    for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 4099) {
        const float v = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
        if (std::fabs(v) < 1e4f) u.push_back(v); // beyond, u³ overflows and the gradient is NaN either way
    }
    const Tensor x = Tensor::from_floats(Shape{u.size()}, u);
    GradientTape tape;
    tape.watch(x);
    const Tensor gx = gelu(x);
    const std::vector<float> y = gx.to_floats(), dx = tape.gradient(gx, {x})[0].to_floats();
    std::size_t forward_mismatches = 0, backward_mismatches = 0;
    for (std::size_t i = 0; i < u.size(); ++i) {
        const float v = u[i], t = vector_math::tanh(k * (v + c * v * v * v));
        const float value = 0.5f * v * (1.0f + t);
        const float slope = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * c * v * v);
        forward_mismatches += std::bit_cast<std::uint32_t>(y[i]) != std::bit_cast<std::uint32_t>(value);
        backward_mismatches += std::bit_cast<std::uint32_t>(dx[i]) != std::bit_cast<std::uint32_t>(slope);
    }
    BOOST_TEST(forward_mismatches == 0u);
    BOOST_TEST(backward_mismatches == 0u);
}
