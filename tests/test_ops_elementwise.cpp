#define BOOST_TEST_MODULE ops_elementwise
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"

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
        {"neg", neg}, {"exp", exp}, {"square", square}, {"abs", abs}, {"relu", relu},
        {"tanh", tanh}, {"sigmoid", sigmoid}, {"gelu", gelu}};
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
            check(name, f, {random(ta ? Shape{4, 3} : Shape{3, 4}, 0.1f, 1.0f, ++seed),
                            random(tb ? Shape{5, 4} : Shape{4, 5}, 0.1f, 1.0f, ++seed)});
            check(name + " batched", f, {random(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 0.1f, 1.0f, ++seed),
                                         random(tb ? Shape{2, 5, 4} : Shape{2, 4, 5}, 0.1f, 1.0f, ++seed)});
            check(name + " shared b", f, {random(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 0.1f, 1.0f, ++seed),
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
    check("dense", with_bias, {random(Shape{3, 4}, 0.1f, 1.0f, 80), random(Shape{4, 5}, 0.1f, 1.0f, 81),
                               random(Shape{5}, 0.1f, 1.0f, 82)});
    check("dense 3-D", with_bias, {random(Shape{2, 3, 4}, 0.1f, 1.0f, 83), random(Shape{4, 5}, 0.1f, 1.0f, 84),
                                   random(Shape{5}, 0.1f, 1.0f, 85)});
    check("dense without bias", [](const auto& in) { return dense(in[0], in[1]); },
          {random(Shape{3, 4}, 0.1f, 1.0f, 86), random(Shape{4, 2}, 0.1f, 1.0f, 87)});

    const Tensor x = random(Shape{8, 16}, 0.1f, 1.0f, 88), w = random(Shape{16, 4}, 0.1f, 1.0f, 89),
                 b = random(Shape{4}, 0.1f, 1.0f, 90);
    const Tensor x16 = x.to(Dtype::float16), w16 = w.to(Dtype::float16), b16 = b.to(Dtype::float16);
    const Tensor once = kernels::add(kernels::matmul(x16.to(Dtype::float32), w16.to(Dtype::float32)),
                                     b16.to(Dtype::float32)).to(Dtype::float16);
    const Tensor y = dense(x16, w16, b16);
    BOOST_TEST(y.dtype() == Dtype::float16);
    for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(y.flat(i) == once.flat(i));
    BOOST_CHECK_THROW(dense(x, w, random(Shape{5}, 0.1f, 1.0f, 91)), shape_error);
    BOOST_CHECK_THROW(dense(x, random(Shape{2, 16, 4}, 0.1f, 1.0f, 92)), shape_error);
}
