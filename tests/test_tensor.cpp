#define BOOST_TEST_MODULE tensor
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <mixprec/autodiff/tensor/detail/vector_math.hpp> // internal: the reference for kernels::tanh

#include <cmath>
#include <random>
#include <sstream>
#include <string>

using namespace mixprec::autodiff;
namespace utf = boost::unit_test;

namespace {

const Dtype all_dtypes[] = {Dtype::float32,   Dtype::float16,     Dtype::bfloat16,
                            Dtype::cbfloat16, Dtype::float8_e4m3, Dtype::float8_e5m2};

/// round(v) to dtype and back, through the scalar formats (independent of the bulk kernels).
float round_to(Dtype dtype, float v) {
    switch (dtype) {
    case Dtype::float32:
        return v;
    case Dtype::float16:
        return float(float16(v));
    case Dtype::bfloat16:
        return float(bfloat16(v));
    case Dtype::cbfloat16:
        return float(cbfloat16(v));
    case Dtype::float8_e4m3:
        return float(float8_e4m3(v));
    case Dtype::float8_e5m2:
        return float(float8_e5m2(v));
    }
    return NAN;
}

bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

template <class E>
std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    return "<no exception>";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<float> random_values(std::size_t n, float lo, float hi, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

} // namespace

// A tensor holds size_of(dtype) bytes per element, zero-initialized, and keeps its dtype.
BOOST_AUTO_TEST_CASE(storage_has_true_width) {
    for (Dtype dtype : all_dtypes) {
        const Tensor t(Shape{3, 5}, dtype);
        BOOST_TEST(t.size() == 15u);
        BOOST_TEST(t.nbytes() == 15u * size_of(dtype));
        BOOST_TEST(t.dtype() == dtype);
        BOOST_TEST(reinterpret_cast<std::uintptr_t>(t.raw()) % 64 == 0u);
        for (std::size_t i = 0; i < t.size(); ++i) BOOST_TEST(t.flat(i) == 0.0f);
    }
    BOOST_TEST(Tensor().size() == 1u);
    BOOST_TEST(Tensor().rank() == 0u);
}

// from_floats rounds each value once, to nearest even, and to(float32) gives back exactly that.
BOOST_AUTO_TEST_CASE(construction_rounds_once) {
    const std::vector<float> v = random_values(1000, -300.0f, 300.0f, 1);
    for (Dtype dtype : all_dtypes) {
        const Tensor t = Tensor::from_floats(Shape{10, 100}, v, dtype);
        const std::vector<float> back = t.to_floats();
        for (std::size_t i = 0; i < v.size(); ++i) BOOST_TEST_REQUIRE(same(back[i], round_to(dtype, v[i])));
    }
    // 1 + 2^-11 is halfway between two float16 values: ties to the even one, 1.
    BOOST_TEST(Tensor::full(Shape{1}, 1.0f + 0x1p-11f, Dtype::float16).flat(0) == 1.0f);
    BOOST_TEST(Tensor::full(Shape{1}, 1e-8f, Dtype::float16).flat(0) == 0.0f); // underflows, as on hardware
    BOOST_TEST(std::isinf(Tensor::full(Shape{1}, 70000.0f, Dtype::float16).flat(0)));
}

// Converting float32 -> A -> B rounds at each step and equals the scalar formats' result.
BOOST_AUTO_TEST_CASE(to_converts_between_every_pair) {
    const std::vector<float> v = random_values(257, -500.0f, 500.0f, 2);
    const Tensor source = Tensor::from_floats(Shape{257}, v);
    for (Dtype a : all_dtypes)
        for (Dtype b : all_dtypes) {
            const Tensor t = source.to(a).to(b);
            BOOST_TEST(t.dtype() == b);
            for (std::size_t i = 0; i < v.size(); ++i)
                BOOST_TEST_REQUIRE(same(t.flat(i), round_to(b, round_to(a, v[i]))));
        }
    BOOST_TEST(source.to(Dtype::float32).shares_storage_with(source));
    BOOST_TEST(!source.to(Dtype::float16).shares_storage_with(source));
}

// Copies share storage, clone() does not, reshape() views the same bytes.
BOOST_AUTO_TEST_CASE(sharing_clone_reshape) {
    Tensor a = Tensor::full(Shape{2, 3}, 1.0f, Dtype::bfloat16);
    Tensor shared = a;
    const Tensor copy = a.clone();
    a.set({1, 2}, 7.0f);
    BOOST_TEST(shared.at({1, 2}) == 7.0f);
    BOOST_TEST(copy.at({1, 2}) == 1.0f);
    const Tensor r = a.reshape(Shape{3, 2});
    BOOST_TEST(r.at({2, 1}) == 7.0f);
    BOOST_TEST(r.shares_storage_with(a));
    const auto msg = message_of<shape_error>([&] { a.reshape(Shape{4, 2}); });
    BOOST_TEST(contains(msg, "(2, 3)"));
    BOOST_TEST(contains(msg, "(4, 2)"));
}

// Element access checks rank and bounds; typed access checks the element type.
BOOST_AUTO_TEST_CASE(checked_access) {
    Tensor t(Shape{2, 3}, Dtype::float16);
    t.set({0, 1}, 2.5f);
    BOOST_TEST(t.at({0, 1}) == 2.5f);
    BOOST_TEST(t.data<float16>()[1].bits() == float16(2.5f).bits());
    BOOST_CHECK_THROW(t.at({2, 0}), std::out_of_range);
    BOOST_CHECK_THROW(t.at({0}), shape_error);
    BOOST_CHECK_THROW(t.flat(6), std::out_of_range);
    const auto msg = message_of<dtype_error>([&] { t.data<float>(); });
    BOOST_TEST(contains(msg, "float32"));
    BOOST_TEST(contains(msg, "float16 (2, 3)"));
}

// Shapes reject rank > 8 and element counts that overflow, before anything is allocated.
BOOST_AUTO_TEST_CASE(shape_limits) {
    BOOST_CHECK_THROW((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), shape_error);
    BOOST_CHECK_THROW((Shape{std::size_t{1} << 30, std::size_t{1} << 30, 4}), shape_error);
    BOOST_CHECK_THROW((Shape{std::size_t{1} << 62, std::size_t{1} << 62}), shape_error);
    BOOST_TEST((Shape{0, std::size_t{1} << 62}).elements() == 0u);
    BOOST_TEST((Shape{2, 3}).to_string() == "(2, 3)");
    BOOST_TEST(Shape{}.to_string() == "()");
    BOOST_TEST((Shape{4, 5}).dim(-1) == 5u);
    BOOST_CHECK_THROW((Shape{4, 5}).dim(2), shape_error);
}

// NumPy broadcasting of shapes, with both shapes named when they are incompatible.
BOOST_AUTO_TEST_CASE(broadcasting_shapes) {
    BOOST_TEST(broadcast_shapes(Shape{8, 1, 6, 1}, Shape{7, 1, 5}) == (Shape{8, 7, 6, 5}));
    BOOST_TEST(broadcast_shapes(Shape{}, Shape{3}) == Shape{3});
    const auto msg = message_of<shape_error>([] { broadcast_shapes(Shape{2, 3}, Shape{4, 3}); });
    BOOST_TEST(contains(msg, "(2, 3)"));
    BOOST_TEST(contains(msg, "(4, 3)"));
}

// xtensor round trip, including a column-major source, and a no-copy view of float32 storage.
BOOST_AUTO_TEST_CASE(xtensor_interop) {
    const xt::xarray<float> x = {{1.0f, 2.0f, 3.0f}, {4.0f, 5.0f, 6.1f}};
    const Tensor t = from_xarray(x, Dtype::float16);
    BOOST_TEST(t.shape() == (Shape{2, 3}));
    BOOST_TEST(t.at({1, 2}) == float(float16(6.1f)));
    BOOST_TEST(to_xarray(t.to(Dtype::float32))(0, 2) == 3.0f);

    xt::xarray<float, xt::layout_type::column_major> c = x;
    BOOST_TEST(from_xarray(c).at({1, 0}) == 4.0f);

    Tensor f = from_xarray(x);
    auto view = as_xt(f);
    view(0, 0) = 9.0f;
    BOOST_TEST(f.at({0, 0}) == 9.0f);
    BOOST_CHECK_THROW(as_xt(t), dtype_error);
}

// Binary kernels compute in float32 and round once: result == round(float(a) op float(b)).
BOOST_AUTO_TEST_CASE(binary_kernels_round_once) {
    const std::vector<float> u = random_values(3000, -100.0f, 100.0f, 3), v = random_values(3000, 0.5f, 50.0f, 4);
    for (Dtype dtype : all_dtypes) {
        const Tensor a = Tensor::from_floats(Shape{3000}, u, dtype), b = Tensor::from_floats(Shape{3000}, v, dtype);
        const auto check = [&](const Tensor& r, auto op) {
            BOOST_TEST_REQUIRE(r.dtype() == dtype);
            for (std::size_t i = 0; i < r.size(); ++i)
                BOOST_TEST_REQUIRE(same(r.flat(i), round_to(dtype, op(a.flat(i), b.flat(i)))));
        };
        check(kernels::add(a, b), std::plus<float>{});
        check(kernels::sub(a, b), std::minus<float>{});
        check(kernels::mul(a, b), std::multiplies<float>{});
        check(kernels::div(a, b), std::divides<float>{});
        check(kernels::maximum(a, b), [](float p, float q) { return std::max(p, q); });
    }
    // float16 2048 + 1 = 2049 is a tie between 2048 and 2050: rounds to even, 2048.
    const Tensor big = Tensor::full(Shape{1}, 2048.0f, Dtype::float16),
                 one = Tensor::full(Shape{1}, 1.0f, Dtype::float16);
    BOOST_TEST(kernels::add(big, one).flat(0) == 2048.0f);
}

// Broadcasting kernels match the same-shape result on explicitly expanded inputs.
BOOST_AUTO_TEST_CASE(binary_kernels_broadcast) {
    const Tensor a = Tensor::from_floats(Shape{2, 1, 3}, random_values(6, -2, 2, 5), Dtype::bfloat16);
    const Tensor b = Tensor::from_floats(Shape{4, 1}, random_values(4, -2, 2, 6), Dtype::bfloat16);
    const Tensor r = kernels::mul(a, b);
    BOOST_TEST(r.shape() == (Shape{2, 4, 3}));
    for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 4; ++j)
            for (std::size_t k = 0; k < 3; ++k)
                BOOST_TEST(r.at({i, j, k}) == round_to(Dtype::bfloat16, a.at({i, 0, k}) * b.at({j, 0})));
    const auto msg = message_of<shape_error>([] { kernels::add(Tensor(Shape{2, 3}), Tensor(Shape{3, 2})); });
    BOOST_TEST(contains(msg, "(2, 3)"));
    BOOST_TEST(contains(msg, "(3, 2)"));
    const auto dmsg = message_of<dtype_error>(
        [] { kernels::add(Tensor(Shape{2}, Dtype::float16), Tensor(Shape{2}, Dtype::float32)); });
    BOOST_TEST(contains(dmsg, "float16"));
    BOOST_TEST(contains(dmsg, "float32"));
}

// Unary kernels: round(f(x)) for each dtype; sigmoid never overflows; relu keeps NaN.
BOOST_AUTO_TEST_CASE(unary_kernels_round_once) {
    const std::vector<float> v = random_values(2500, -8.0f, 8.0f, 7);
    for (Dtype dtype : all_dtypes) {
        const Tensor x = Tensor::from_floats(Shape{2500}, v, dtype);
        const auto check = [&](const Tensor& r, auto f) {
            for (std::size_t i = 0; i < r.size(); ++i)
                BOOST_TEST_REQUIRE(same(r.flat(i), round_to(dtype, f(x.flat(i)))));
        };
        check(kernels::neg(x), [](float p) { return -p; });
        check(kernels::abs(x), [](float p) { return std::fabs(p); });
        check(kernels::exp(x), [](float p) { return std::exp(p); });
        // mixprec's vectorizable tanh (within 2 ulp of the exact value: tests/test_ops_elementwise.cpp)
        check(kernels::tanh(x), [](float p) { return detail::tanh(p); });
        check(kernels::square(x), [](float p) { return p * p; });
        check(kernels::scale(x, 0.25f), [](float p) { return p * 0.25f; });
        check(kernels::relu(x), [](float p) { return p > 0 ? p : 0.0f; });
    }
    const Tensor extreme = Tensor::from_floats(Shape{3}, std::vector<float>{-1000.0f, 0.0f, 1000.0f});
    const Tensor s = kernels::sigmoid(extreme);
    BOOST_TEST(s.flat(0) == 0.0f);
    BOOST_TEST(s.flat(1) == 0.5f);
    BOOST_TEST(s.flat(2) == 1.0f);
    BOOST_TEST(std::isnan(kernels::relu(Tensor::full(Shape{1}, NAN)).flat(0)));
}

// ---- printing ----

namespace {
/// x's description, a line break, then `numpy`: what NumPy 1.24's str() gives for the same array.
std::string printed_as(const Tensor& x, const std::string& numpy) { return x.description() + "\n" + numpy; }

Tensor floats(const Shape& shape, std::vector<float> v, Dtype dtype = Dtype::float32) {
    return Tensor::from_floats(shape, v, dtype);
}
Tensor arange(const Shape& shape) {
    std::vector<float> v(shape.elements());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    return floats(shape, v);
}
} // namespace

// The expected texts are NumPy 1.24's str() of the same float32 (or float16) arrays.
BOOST_AUTO_TEST_CASE(to_string_prints_like_numpy) {
    const Tensor x = floats(Shape{2, 3}, {1, 2.5f, -3, 0.125f, 4, 5});
    BOOST_TEST(to_string(x) == "float32 (2, 3)\n"
                               "[[ 1.     2.5   -3.   ]\n"
                               " [ 0.125  4.     5.   ]]");
    std::ostringstream os;
    os << x;
    BOOST_TEST(os.str() == to_string(x));

    // Each value with the fewest digits that read back as the same value of the tensor's dtype.
    BOOST_TEST(to_string(floats(Shape{3}, {0.1f, 0.2f, 1.0f / 3}, Dtype::float16)) ==
               "float16 (3)\n[0.1    0.2    0.3333]");
    BOOST_TEST(to_string(floats(Shape{3}, {0.1f, 0.2f, 1.0f / 3})) ==
               "float32 (3)\n[0.1        0.2        0.33333334]");
    BOOST_TEST(to_string(floats(Shape{3}, {1.0f / 3, 2.0f / 3, 100})) ==
               "float32 (3)\n[  0.33333334   0.6666667  100.        ]");
    BOOST_TEST(to_string(floats(Shape{3}, {1.0f / 3, 2.0f / 3, 100}), {.precision = 3}) ==
               "float32 (3)\n[  0.333   0.667 100.   ]");
    BOOST_TEST(to_string(floats(Shape{2}, {0.1004f, 2.5f}), {.precision = 3}) == "float32 (2)\n[0.1 2.5]");
    BOOST_TEST(to_string(floats(Shape{2}, {0.12349f, 2.5f}), {.precision = 3}) == "float32 (2)\n[0.123 2.5  ]");

    // Scientific notation past NumPy's limits; non-finite values aligned with the others.
    BOOST_TEST(to_string(floats(Shape{2}, {1.5e-5f, 1})) == "float32 (2)\n[1.5e-05 1.0e+00]");
    BOOST_TEST(to_string(floats(Shape{2}, {123456789.0f, 1})) == "float32 (2)\n[1.2345679e+08 1.0000000e+00]");
    BOOST_TEST(to_string(floats(Shape{3}, {0.0f, -0.0f, 1e8f})) == "float32 (3)\n[ 0.e+00 -0.e+00  1.e+08]");
    const std::vector<float> e4m3_values{448, -0.0625f, 3.5f, 0.001953125f}; // exact in float8_e4m3
    BOOST_TEST(to_string(floats(Shape{4}, e4m3_values)) ==
               "float32 (4)\n[ 4.480000e+02 -6.250000e-02  3.500000e+00  1.953125e-03]");
    BOOST_TEST(to_string(floats(Shape{4}, e4m3_values, Dtype::float8_e4m3)) ==
               "float8_e4m3 (4)\n[ 4.5e+02 -6.2e-02  3.5e+00  2.0e-03]"); // enough to tell float8 values apart
    BOOST_TEST(to_string(floats(Shape{4}, {-1e-5f, 1, NAN, -INFINITY})) ==
               "float32 (4)\n[-1.e-05  1.e+00     nan    -inf]");
    BOOST_TEST(to_string(floats(Shape{2}, {1, NAN})) == "float32 (2)\n[ 1. nan]");
    BOOST_TEST(to_string(floats(Shape{2}, {NAN, INFINITY}, Dtype::bfloat16)) == "bfloat16 (2)\n[nan inf]");
    BOOST_TEST(to_string(floats(Shape{}, {3.5f})) == "float32 ()\n3.5");
    BOOST_TEST(to_string(Tensor(Shape{2, 0})) == "float32 (2, 0)\n[]");
}

// Nesting, wrapping at the line width, and summaries past the threshold.
BOOST_AUTO_TEST_CASE(to_string_nests_wraps_and_summarizes) {
    BOOST_TEST(to_string(arange(Shape{2, 3, 4})) == printed_as(arange(Shape{2, 3, 4}), "[[[ 0.  1.  2.  3.]\n"
                                                                                       "  [ 4.  5.  6.  7.]\n"
                                                                                       "  [ 8.  9. 10. 11.]]\n"
                                                                                       "\n"
                                                                                       " [[12. 13. 14. 15.]\n"
                                                                                       "  [16. 17. 18. 19.]\n"
                                                                                       "  [20. 21. 22. 23.]]]"));
    BOOST_TEST(to_string(arange(Shape{30})) ==
               printed_as(arange(Shape{30}),
                          "[ 0.  1.  2.  3.  4.  5.  6.  7.  8.  9. 10. 11. 12. 13. 14. 15. 16. 17.\n"
                          " 18. 19. 20. 21. 22. 23. 24. 25. 26. 27. 28. 29.]"));
    BOOST_TEST(to_string(arange(Shape{2, 6}), {.linewidth = 20}) ==
               printed_as(arange(Shape{2, 6}), "[[ 0.  1.  2.  3.\n   4.  5.]\n [ 6.  7.  8.  9.\n  10. 11.]]"));

    BOOST_TEST(to_string(arange(Shape{1000})).find("999.]") != std::string::npos); // 1000 elements: all shown
    BOOST_TEST(to_string(arange(Shape{2000})) ==
               printed_as(arange(Shape{2000}), "[0.000e+00 1.000e+00 2.000e+00 ... 1.997e+03 1.998e+03 1.999e+03]"));
    BOOST_TEST(to_string(arange(Shape{40, 50})) ==
               printed_as(arange(Shape{40, 50}),
                          "[[0.000e+00 1.000e+00 2.000e+00 ... 4.700e+01 4.800e+01 4.900e+01]\n"
                          " [5.000e+01 5.100e+01 5.200e+01 ... 9.700e+01 9.800e+01 9.900e+01]\n"
                          " [1.000e+02 1.010e+02 1.020e+02 ... 1.470e+02 1.480e+02 1.490e+02]\n"
                          " ...\n"
                          " [1.850e+03 1.851e+03 1.852e+03 ... 1.897e+03 1.898e+03 1.899e+03]\n"
                          " [1.900e+03 1.901e+03 1.902e+03 ... 1.947e+03 1.948e+03 1.949e+03]\n"
                          " [1.950e+03 1.951e+03 1.952e+03 ... 1.997e+03 1.998e+03 1.999e+03]]"));
    const std::string cube = to_string(arange(Shape{10, 10, 12}));
    BOOST_TEST(cube.find("  [3.480e+02 3.490e+02 3.500e+02 ... 3.570e+02 3.580e+02 3.590e+02]]\n"
                         "\n"
                         " ...\n"
                         "\n"
                         " [[8.400e+02 8.410e+02 8.420e+02 ... 8.490e+02 8.500e+02 8.510e+02]\n") != std::string::npos);
    BOOST_TEST(to_string(arange(Shape{10}), {.threshold = 5, .edgeitems = 1}) ==
               printed_as(arange(Shape{10}), "[0. ... 9.]"));
    BOOST_TEST(to_string(arange(Shape{3, 4}), {.threshold = 5, .edgeitems = 1}) ==
               printed_as(arange(Shape{3, 4}), "[[ 0. ...  3.]\n ...\n [ 8. ... 11.]]"));
    BOOST_CHECK_THROW(to_string(arange(Shape{2}), {.precision = -1}), std::invalid_argument);
}
