#define BOOST_TEST_MODULE matmul
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "error_bounds.hpp"

#include <cmath>
#include <cstring>
#include <random>

using namespace mixprec::autodiff;

namespace {

const Dtype all_dtypes[] = {Dtype::float32,   Dtype::float16,     Dtype::bfloat16,
                            Dtype::cbfloat16, Dtype::float8_e4m3, Dtype::float8_e5m2};

/// A 1x1 tensor holding x rounded to dtype.
Tensor one(float x, Dtype dtype) { return Tensor::from_floats(Shape{1, 1}, std::vector<float>{x}, dtype); }

Tensor random_tensor(const Shape& shape, Dtype dtype, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> v(shape.elements());
    for (auto& x : v) x = dist(gen);
    return Tensor::from_floats(shape, v, dtype);
}

/// Element (i, j) of op(t) for batch b, where t is rank 2 (shared by every batch) or rank 3.
double element(const Tensor& t, std::size_t b, std::size_t i, std::size_t j, bool transpose) {
    if (transpose) std::swap(i, j);
    return t.rank() == 3 ? t.at({b, i, j}) : t.at({i, j});
}

/// The reduction length of op(a) @ op(b).
std::size_t depth(const Tensor& a, MatmulOptions o) { return o.transpose_a ? a.shape().dim(-2) : a.shape().dim(-1); }

/// Calls f(index, exact, magnitude) for every element of c = op(a) @ op(b), in c's flat order: the float64
/// sum of the (already rounded) operands' products and the sum of their magnitudes.
template <class F>
void for_each_sum(const Tensor& a, const Tensor& b, const Tensor& c, MatmulOptions o, F f) {
    const bool batched = c.rank() == 3;
    const std::size_t batches = batched ? c.shape()[0] : 1, m = c.shape().dim(-2), n = c.shape().dim(-1);
    const std::size_t k = depth(a, o);
    std::size_t index = 0;
    for (std::size_t bi = 0; bi < batches; ++bi)
        for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) {
                double exact = 0, magnitude = 0;
                for (std::size_t p = 0; p < k; ++p) {
                    const double term = element(a, bi, i, p, o.transpose_a) * element(b, bi, p, j, o.transpose_b);
                    exact += term;
                    magnitude += std::fabs(term);
                }
                f(index++, exact, magnitude);
            }
}

/// Checks c against a float64 product of the (already rounded) operands: the only errors allowed are
/// float32 accumulation of k terms in any order and the one final rounding to the dtype (error_bounds.hpp).
void check_product(const Tensor& a, const Tensor& b, const Tensor& c, MatmulOptions o) {
    const std::size_t k = depth(a, o);
    std::size_t bad = 0;
    for_each_sum(a, b, c, o, [&](std::size_t index, double exact, double magnitude) {
        const double got = c.flat(index);
        if (std::fabs(got - exact) > error_bounds::rounded_sum_error(c.dtype(), k, exact, magnitude) && ++bad <= 3)
            BOOST_TEST_MESSAGE("c.flat(" << index << ") = " << got << ", expected " << exact
                                         << " (Σ|a b| = " << magnitude << ")");
    });
    BOOST_TEST(bad == 0u, c.dtype() << " " << a.shape() << " @ " << b.shape() << ": " << bad << " elements off");
}

} // namespace

// Small integers multiply exactly in every format: the result is exact and keeps the operands' dtype.
BOOST_AUTO_TEST_CASE(exact_small_products) {
    const std::vector<float> av{1, 2, 3, 4, 5, 6}, bv{1, 0, -1, 2, 0.5f, 1};
    for (Dtype dtype : all_dtypes) {
        const Tensor c =
            kernels::matmul(Tensor::from_floats(Shape{2, 3}, av, dtype), Tensor::from_floats(Shape{3, 2}, bv, dtype));
        BOOST_TEST(c.dtype() == dtype);
        BOOST_TEST(c.shape() == (Shape{2, 2}));
        BOOST_TEST(c.at({0, 0}) == 0.5f);  // 1 - 2 + 1.5
        BOOST_TEST(c.at({0, 1}) == 7.0f);  // 0 + 4 + 3
        BOOST_TEST(c.at({1, 1}) == 16.0f); // 0 + 10 + 6
    }
}

/// Runs f() with each float32 GEMM library in turn, restoring the process's own after.
template <class F>
void with_each_library(F f) {
    const Float32Gemm before = float32_gemm();
    for (Float32Gemm library :
         {Float32Gemm::automatic, Float32Gemm::openblas, Float32Gemm::onednn, Float32Gemm::measured})
        BOOST_TEST_CONTEXT(name_of(library)) {
            set_float32_gemm(library);
            f();
        }
    set_float32_gemm(before);
}

// Random products in every dtype, 2-D and batched, with and without transposes, on both float32 GEMM
// libraries; and one large enough to run on the libraries' own threads.
BOOST_AUTO_TEST_CASE(random_products_match_float64) {
    with_each_library([] {
        unsigned seed = 10;
        for (Dtype dtype : all_dtypes)
            for (bool ta : {false, true})
                for (bool tb : {false, true}) {
                    const MatmulOptions o{.transpose_a = ta, .transpose_b = tb};
                    const Tensor a = random_tensor(ta ? Shape{37, 23} : Shape{23, 37}, dtype, ++seed);
                    const Tensor b = random_tensor(tb ? Shape{19, 37} : Shape{37, 19}, dtype, ++seed);
                    check_product(a, b, kernels::matmul(a, b, o), o);
                    const Tensor a3 = random_tensor(ta ? Shape{3, 37, 23} : Shape{3, 23, 37}, dtype, ++seed);
                    const Tensor b3 = random_tensor(tb ? Shape{3, 19, 37} : Shape{3, 37, 19}, dtype, ++seed);
                    check_product(a3, b3, kernels::matmul(a3, b3, o), o);
                    check_product(a3, b, kernels::matmul(a3, b, o), o); // one b shared by every batch
                }
        const Tensor a = random_tensor(Shape{160, 300}, Dtype::float32, 90);
        const Tensor b = random_tensor(Shape{130, 300}, Dtype::float32, 91);
        check_product(a, b, kernels::matmul(a, b, {.transpose_b = true}), {.transpose_b = true});
    });
}

// Each library's name gives it back; any other name is refused with the choices.
BOOST_AUTO_TEST_CASE(float32_gemm_libraries_by_name) {
    for (Float32Gemm library :
         {Float32Gemm::automatic, Float32Gemm::openblas, Float32Gemm::onednn, Float32Gemm::measured})
        BOOST_TEST((float32_gemm_named(name_of(library)) == library));
    BOOST_CHECK_EXCEPTION(float32_gemm_named("mkl"), std::invalid_argument, [](const std::invalid_argument& e) {
        const std::string m = e.what();
        return m.find("'mkl'") != std::string::npos &&
               m.find("automatic, openblas, onednn, measured") != std::string::npos;
    });
}

// Float32Gemm::automatic gives the bits of the library its rule names: oneDNN's for a product of one
// right-hand matrix from the avx512 level up, OpenBLAS's for a batch of products and at every level
// below. The two libraries differ in the last bits of both products here (on Skylake-SP; where they agree
// on one, its check is weaker, never wrong).
BOOST_AUTO_TEST_CASE(automatic_gemm_takes_the_library_of_its_rule) {
    const Float32Gemm before = float32_gemm();
    const auto bits = [](Float32Gemm library, const Tensor& a, const Tensor& b) {
        set_float32_gemm(library);
        const Tensor c = kernels::matmul(a, b);
        const auto* p = static_cast<const unsigned char*>(c.raw());
        return std::vector<unsigned char>(p, p + c.nbytes());
    };
    const Tensor a = random_tensor(Shape{64, 300}, Dtype::float32, 70),
                 b = random_tensor(Shape{300, 50}, Dtype::float32, 71);
    const Tensor a3 = random_tensor(Shape{2, 64, 300}, Dtype::float32, 72),
                 b3 = random_tensor(Shape{2, 300, 40}, Dtype::float32, 73);
    const Isa level = isa();
    for (Isa l : available_isas()) BOOST_TEST_CONTEXT(name_of(l)) {
            set_isa(l);
            const Float32Gemm one = l >= Isa::avx512 ? Float32Gemm::onednn : Float32Gemm::openblas;
            BOOST_TEST((bits(Float32Gemm::automatic, a, b) == bits(one, a, b)));
            BOOST_TEST((bits(Float32Gemm::automatic, a3, b3) == bits(Float32Gemm::openblas, a3, b3)));
        }
    set_isa(level);
    set_float32_gemm(before);
}

// Float32Gemm::measured times both libraries once per shape, lists its choice with both times, gives the
// bits of the library it chose from then on, and counts the product's roundings once (not once per trial).
BOOST_AUTO_TEST_CASE(measured_products_are_listed_and_kept) {
    const Float32Gemm before = float32_gemm();
    set_float32_gemm(Float32Gemm::measured);
    const Tensor a = random_tensor(Shape{41, 29}, Dtype::float16, 95),
                 b = random_tensor(Shape{29, 23}, Dtype::float16, 96);
    RoundingStats counted;
    Tensor first;
    {
        RoundingRecorder recorder;
        first = kernels::matmul(a, b);
        counted = recorder.total();
    }
    BOOST_TEST(counted.count == first.size());
    std::string chosen;
    for (const std::string& line : measured_choices())
        if (line.rfind("matmul (41, 29) @ (29, 23) float16: ", 0) == 0) {
            BOOST_TEST_MESSAGE(line);
            BOOST_TEST(line.find("openblas ") != std::string::npos);
            BOOST_TEST(line.find("onednn ") != std::string::npos);
            const std::size_t from = line.find(": ") + 2;
            chosen = line.substr(from, line.find(',', from) - from);
        }
    BOOST_TEST_REQUIRE(!chosen.empty());
    const std::size_t listed = measured_choices().size();
    const auto same = [&](const Tensor& t) { return std::memcmp(t.raw(), first.raw(), first.nbytes()) == 0; };
    BOOST_TEST(same(kernels::matmul(a, b)));
    BOOST_TEST(measured_choices().size() == listed);
    set_float32_gemm(float32_gemm_named(chosen));
    BOOST_TEST(same(kernels::matmul(a, b)));
    set_float32_gemm(before);
    check_product(a, b, first, {});
}

// An adopted library is taken without timing, and gives that library's bits.
BOOST_AUTO_TEST_CASE(adopted_products_are_taken_without_timing) {
    const Float32Gemm before = float32_gemm();
    const Tensor a = random_tensor(Shape{37, 31}, Dtype::float32, 97),
                 b = random_tensor(Shape{31, 19}, Dtype::float32, 98);
    const std::string key = "matmul (37, 31) @ (31, 19) float32";
    for (Float32Gemm library : {Float32Gemm::openblas, Float32Gemm::onednn}) BOOST_TEST_CONTEXT(name_of(library)) {
            set_float32_gemm(library);
            const Tensor pinned = kernels::matmul(a, b);
            forget_measured_choices();
            adopt_measured_choices(std::vector<MeasuredChoice>{{key, std::string(name_of(library))}});
            set_float32_gemm(Float32Gemm::measured);
            const Tensor adopted = kernels::matmul(a, b);
            BOOST_TEST(std::memcmp(adopted.raw(), pinned.raw(), pinned.nbytes()) == 0);
            BOOST_TEST((measured_choices() ==
                        std::vector<std::string>{key + ": " + std::string(name_of(library)) + ", adopted"}));
        }
    forget_measured_choices();
    set_float32_gemm(before);
}

// The two bfloat16 backends compute the same products (up to float32 summation order).
BOOST_AUTO_TEST_CASE(bfloat16_backends_agree) {
    if (isa() < Isa::avx512_bf16) {
        BOOST_TEST_MESSAGE("no AVX512-BF16 on this CPU: the onednn backend is not available");
        BOOST_CHECK_THROW(kernels::matmul(Tensor(Shape{2, 2}, Dtype::bfloat16), Tensor(Shape{2, 2}, Dtype::bfloat16),
                                          {.backend = MatmulBackend::onednn}),
                          std::invalid_argument);
        return;
    }
    for (bool tb : {false, true}) {
        const Tensor a = random_tensor(Shape{4, 64, 300}, Dtype::bfloat16, 1);
        const Tensor b = random_tensor(tb ? Shape{4, 50, 300} : Shape{4, 300, 50}, Dtype::bfloat16, 2);
        const MatmulOptions one{.transpose_b = tb, .backend = MatmulBackend::onednn};
        const MatmulOptions two{.transpose_b = tb, .backend = MatmulBackend::sgemm};
        const Tensor c1 = kernels::matmul(a, b, one), c2 = kernels::matmul(a, b, two);
        check_product(a, b, c1, one);
        check_product(a, b, c2, two);
        // The two routes sum in different orders (and oneDNN flushes subnormals): each result lies within
        // its bound of the exact sum, so they differ by at most twice the float32 sum error plus the two
        // roundings. A bound relative to |c| alone cannot hold where the sum cancels.
        std::size_t far = 0;
        for_each_sum(a, b, c1, one, [&](std::size_t i, double, double magnitude) {
            far +=
                std::fabs(c1.flat(i) - c2.flat(i)) >
                error_bounds::two_orders_difference(Dtype::bfloat16, depth(a, one), magnitude, c1.flat(i), c2.flat(i));
        });
        BOOST_TEST(far == 0u);
    }
    BOOST_CHECK_THROW(kernels::matmul(Tensor(Shape{2, 2}), Tensor(Shape{2, 2}), {.backend = MatmulBackend::onednn}),
                      std::invalid_argument);
}

// A bias is added to every row in float32 before the one rounding, on every route: exact here, since
// every term and sum is a small multiple of 2^-4.
BOOST_AUTO_TEST_CASE(bias_is_added_before_the_one_rounding) {
    const std::vector<float> bv{1, 0, -1, 2, 0.5f, 1}, biasv{0.0625f, -7};
    std::vector<float> av; // 64 rows (split over threads), alternating (1 2 3) and (4 5 6)
    for (int i = 0; i < 32; ++i) av.insert(av.end(), {1, 2, 3, 4, 5, 6});
    with_each_library([&] {
        for (Dtype dtype : all_dtypes)
            for (MatmulBackend backend : {MatmulBackend::automatic, MatmulBackend::sgemm}) {
                const Tensor bias = Tensor::from_floats(Shape{2}, biasv, dtype);
                const Tensor c =
                    kernels::matmul(Tensor::from_floats(Shape{64, 3}, av, dtype),
                                    Tensor::from_floats(Shape{3, 2}, bv, dtype), {.backend = backend}, &bias);
                const float expected[] = {0.5f, 7, 2, 16}; // a @ b, rows (1 2 3) and (4 5 6)
                for (std::size_t i = 0; i < c.size(); ++i)
                    BOOST_TEST_REQUIRE(c.flat(i) == one(expected[i % 4] + bias.flat(i % 2), dtype).flat(0),
                                       dtype << " element " << i);
            }
    });
}

// The oneDNN route rounds as AVX512-BF16 does: a result below 2^-126 comes out as zero (vdpbf16ps
// flushes it), where the sgemm route keeps the bfloat16 subnormal.
BOOST_AUTO_TEST_CASE(onednn_route_flushes_float32_subnormal_results) {
    if (isa() < Isa::avx512_bf16) return;
    const Tensor a = one(0x1p-65f, Dtype::bfloat16), b = one(0x1p-65f, Dtype::bfloat16);
    BOOST_TEST(kernels::matmul(a, b, {.backend = MatmulBackend::sgemm}).flat(0) == 0x1p-130f);
    BOOST_TEST(kernels::matmul(a, b, {.backend = MatmulBackend::onednn}).flat(0) == 0.0f);
    const Tensor c = one(0x1p-60f, Dtype::bfloat16); // 2^-125: normal, kept
    BOOST_TEST(kernels::matmul(a, c, {.backend = MatmulBackend::onednn}).flat(0) == 0x1p-125f);
}

// Empty dimensions give empty or zero results, as in NumPy.
BOOST_AUTO_TEST_CASE(empty_dimensions) {
    const Tensor c = kernels::matmul(Tensor(Shape{3, 0}, Dtype::float16), Tensor(Shape{0, 2}, Dtype::float16));
    BOOST_TEST(c.shape() == (Shape{3, 2}));
    for (std::size_t i = 0; i < c.size(); ++i) BOOST_TEST(c.flat(i) == 0.0f);
    BOOST_TEST(kernels::matmul(Tensor(Shape{0, 4}), Tensor(Shape{4, 2})).size() == 0u);
}

// Bad shapes and dtypes are refused with messages that name both operands.
BOOST_AUTO_TEST_CASE(clear_errors) {
    const auto message = [](auto f) -> std::string {
        try {
            f();
        } catch (const std::exception& e) {
            return e.what();
        }
        return "<no exception>";
    };
    auto msg = message([] { kernels::matmul(Tensor(Shape{2, 3}), Tensor(Shape{4, 5})); });
    BOOST_TEST(msg.find("(2, 3)") != std::string::npos);
    BOOST_TEST(msg.find("(4, 5)") != std::string::npos);
    msg = message([] { kernels::matmul(Tensor(Shape{2, 3, 4}), Tensor(Shape{3, 4, 5})); });
    BOOST_TEST(msg.find("batch") != std::string::npos);
    msg = message([] { kernels::matmul(Tensor(Shape{2}), Tensor(Shape{2, 2})); });
    BOOST_TEST(msg.find("rank") != std::string::npos);
    BOOST_CHECK_THROW(kernels::matmul(Tensor(Shape{2, 2}), Tensor(Shape{2, 2}, Dtype::float16)), dtype_error);
    BOOST_CHECK_THROW(kernels::matmul(Tensor(Shape{2, 2}), Tensor(Shape{2, 2, 2})), shape_error);
}
