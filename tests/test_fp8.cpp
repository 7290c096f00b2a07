#define BOOST_TEST_MODULE fp8
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "error_bounds.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace mixprec::autodiff;

namespace {

constexpr float infinity = std::numeric_limits<float>::infinity();
constexpr float not_a_number = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_values(std::size_t n, float range, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-range, range);
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen);
    return v;
}

Tensor random_tensor(const Shape& shape, float range, unsigned seed, Dtype dtype = Dtype::float32) {
    return Tensor::from_floats(shape, random_values(shape.elements(), range, seed), dtype);
}

/// x rounded into `format` as quantize promises: x·s in float32, then to nearest even, saturating.
float scaled_cast(float x, float s, Dtype format) {
    const float scaled = x * s;
    return format == Dtype::float8_e4m3 ? float(float8_e4m3::saturating(scaled))
                                        : float(float8_e5m2::saturating(scaled));
}

/// Integers in [-range, range], exact in every format here.
Tensor integer_tensor(const Shape& shape, int range, unsigned seed, Dtype dtype) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> dist(-range, range);
    std::vector<float> v(shape.elements());
    for (float& x : v) x = float(dist(gen));
    return Tensor::from_floats(shape, v, dtype);
}

/// a and b have the same shape, dtype and bits.
bool same_bits(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
    const std::vector<float> x = a.to_floats(), y = b.to_floats();
    for (std::size_t i = 0; i < x.size(); ++i)
        if (std::bit_cast<std::uint32_t>(x[i]) != std::bit_cast<std::uint32_t>(y[i])) return false;
    return true;
}

/// A scale function that returns `s` and remembers the amax it was given.
Fp8Cast fixed(Dtype format, float s, float* seen = nullptr) {
    return {format, [s, seen](float amax) {
                if (seen != nullptr) *seen = amax;
                return s;
            }};
}

/// Current scaling: the largest finite of the format over the amax.
Fp8Cast current(Dtype format) {
    const float top = format == Dtype::float8_e4m3 ? 448.0f : 57344.0f;
    return {format, [top](float amax) { return amax > 0 ? top / amax : 1.0f; }};
}

/// Checks c (rows, n) against the float64 product of the decoded FP8 operands times alpha: the float32
/// sum of exact products and its one rounding to c's dtype are the only errors (error_bounds.hpp), scaled
/// by alpha, plus alpha's own float32 product.
void check_product(const Tensor& c, const std::vector<float>& a, const std::vector<float>& b, std::size_t rows,
                   std::size_t k, std::size_t n, bool transpose_b, double alpha) {
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < n; ++j) {
            double exact = 0, magnitude = 0;
            for (std::size_t p = 0; p < k; ++p) {
                const double t = double(a[i * k + p]) * b[transpose_b ? j * k + p : p * n + j];
                exact += t;
                magnitude += std::fabs(t);
            }
            const double bound =
                alpha * (error_bounds::float32_sum_error(k, magnitude) + error_bounds::gamma64(k) * magnitude) +
                0x1p-21 * alpha * magnitude;
            const double got = c.flat(i * n + j), want = alpha * exact;
            const double rounding = 0.5 * error_bounds::ulp(c.dtype(), std::fabs(want) + bound);
            BOOST_TEST(std::fabs(got - want) <= bound + rounding,
                       "element " << i << "," << j << ": " << got << " vs " << want);
        }
}

/// Checks that `product` (dense_fp8 or dense_mxfp8 on x, w, b) gives dense's y and the gradients of Σ y·c
/// with respect to x, w and b, bit for bit.
template <class Product>
void check_equals_dense(Product product, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& c) {
    std::vector<Tensor> want, got;
    for (const bool narrow : {false, true}) {
        GradientTape tape;
        tape.watch(x);
        tape.watch(w);
        tape.watch(b);
        const Tensor y = narrow ? product(x, w, b) : dense(x, w, b);
        std::vector<Tensor> g = tape.gradient(y * c, {x, w, b});
        g.insert(g.begin(), y);
        (narrow ? got : want) = g;
    }
    for (std::size_t i = 0; i < want.size(); ++i)
        BOOST_TEST(got[i].to_floats() == want[i].to_floats(), boost::test_tools::per_element());
}

} // namespace

BOOST_AUTO_TEST_CASE(amax_is_the_largest_finite_magnitude) {
    BOOST_TEST(kernels::amax(Tensor::from_floats(
                   Shape{5}, std::vector<float>{1.0f, -7.5f, infinity, not_a_number, 3.0f})) == 7.5f);
    BOOST_TEST(kernels::amax(Tensor::from_floats(Shape{2}, std::vector<float>{-infinity, not_a_number})) == 0.0f);
    BOOST_TEST(kernels::amax(Tensor(Shape{0})) == 0.0f);
    BOOST_TEST(kernels::amax(Tensor::from_floats(Shape{1}, std::vector<float>{-0x1p-149f})) == 0x1p-149f);
    // Across many chunks and threads, in a narrow dtype.
    std::vector<float> v = random_values(100'003, 3.0f, 1);
    v[77'777] = -5.0f;
    BOOST_TEST(kernels::amax(Tensor::from_floats(Shape{v.size()}, v, Dtype::bfloat16)) == 5.0f);
}

BOOST_AUTO_TEST_CASE(quantize_scales_then_rounds_saturating) {
    const std::vector<float> v{0.0f,  -0.0f,    1.0f,      -3.3f,        1e-5f,      300.0f,
                               -1e6f, infinity, -infinity, not_a_number, 0.01171875f};
    for (const Dtype format : {Dtype::float8_e4m3, Dtype::float8_e5m2})
        for (const float s : {1.0f, 0.37f, 3.0f, 1024.0f}) {
            const Tensor q = kernels::quantize(Tensor::from_floats(Shape{v.size()}, v), s, format);
            BOOST_TEST(q.dtype() == format);
            for (std::size_t i = 0; i < v.size(); ++i) {
                const float want = scaled_cast(v[i], s, format), got = q.flat(i);
                if (std::isnan(v[i]))
                    BOOST_TEST(std::isnan(got));
                else
                    BOOST_TEST(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want),
                               name_of(format) << " s=" << s << " x=" << v[i] << ": " << got << " vs " << want);
            }
        }
    // Infinity saturates instead of staying infinite (e5m2 has infinities).
    BOOST_TEST(kernels::quantize(Tensor::from_floats(Shape{1}, std::vector<float>{-infinity}), 1.0f, Dtype::float8_e5m2)
                   .flat(0) == -57344.0f);
    // Overflow::infinity keeps the overflow visible: e5m2 gives infinity, e4m3 (no infinity) NaN.
    const Tensor big = Tensor::from_floats(Shape{2}, std::vector<float>{-1e6f, 3.0f});
    BOOST_TEST(kernels::quantize(big, 1.0f, Dtype::float8_e5m2, Overflow::infinity).flat(0) == -infinity);
    BOOST_TEST(std::isnan(kernels::quantize(big, 1.0f, Dtype::float8_e4m3, Overflow::infinity).flat(0)));
    BOOST_TEST(kernels::quantize(big, 1.0f, Dtype::float8_e5m2, Overflow::infinity).flat(1) == 3.0f);
    BOOST_CHECK_THROW(kernels::quantize(Tensor(Shape{1}), 0.0f, Dtype::float8_e4m3), std::invalid_argument);
    BOOST_CHECK_THROW(kernels::quantize(Tensor(Shape{1}), infinity, Dtype::float8_e4m3), std::invalid_argument);
    BOOST_CHECK_THROW(kernels::quantize(Tensor(Shape{1}), 1.0f, Dtype::float32), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(matmul_alpha_and_mixed_fp8_operands) {
    const std::size_t m = 9, k = 70, n = 11;
    const Tensor a = kernels::quantize(random_tensor(Shape{m, k}, 2.0f, 2), 100.0f, Dtype::float8_e5m2);
    const Tensor b = kernels::quantize(random_tensor(Shape{n, k}, 2.0f, 3), 200.0f, Dtype::float8_e4m3);
    for (const Dtype out : {Dtype::float32, Dtype::bfloat16, Dtype::float16}) {
        const float alpha = (1.0f / 100.0f) * (1.0f / 200.0f);
        const Tensor c = kernels::matmul(a, b, {.transpose_b = true, .alpha = alpha, .out_dtype = out});
        BOOST_TEST(c.dtype() == out);
        BOOST_TEST((c.shape() == Shape{m, n}));
        check_product(c, a.to_floats(), b.to_floats(), m, k, n, true, alpha);
    }
    // Without out_dtype the operands must agree; a bias must be in the result's dtype.
    BOOST_CHECK_THROW(kernels::matmul(a, b, {.transpose_b = true}), dtype_error);
    const Tensor bias(Shape{n}, Dtype::float32);
    BOOST_CHECK_THROW(kernels::matmul(a, b, {.transpose_b = true, .out_dtype = Dtype::bfloat16}, &bias), dtype_error);
    // alpha multiplies the float32 product before the bias is added.
    const Tensor x = Tensor::from_floats(Shape{1, 2}, std::vector<float>{1.0f, 2.0f});
    const Tensor w = Tensor::from_floats(Shape{2, 1}, std::vector<float>{3.0f, 4.0f});
    const Tensor one_bias = Tensor::from_floats(Shape{1}, std::vector<float>{1.0f});
    BOOST_TEST(kernels::matmul(x, w, {.alpha = 0.5f}, &one_bias).flat(0) == 6.5f);
}

// With power-of-two scales and values the formats hold exactly, every cast is exact, so the FP8 product
// and its gradients equal dense's bit for bit: the casts pass gradients straight through.
BOOST_AUTO_TEST_CASE(exact_operands_give_dense_bit_for_bit) {
    const auto integers = [](const Shape& shape, int range, unsigned seed) {
        return integer_tensor(shape, range, seed, Dtype::float32);
    };
    const Tensor x = integers(Shape{4, 3, 16}, 8, 4), w = integers(Shape{16, 5}, 4, 5), b = integers(Shape{5}, 9, 6);
    const Tensor c = integers(Shape{4, 3, 5}, 3, 7); // dy
    const Fp8DenseCasts casts{fixed(Dtype::float8_e4m3, 4.0f), fixed(Dtype::float8_e4m3, 8.0f),
                              fixed(Dtype::float8_e5m2, 0.25f)};
    check_equals_dense(
        [&](const Tensor& x_, const Tensor& w_, const Tensor& b_) { return dense_fp8(x_, w_, b_, casts); }, x, w, b, c);
}

// Random operands with current scaling: each result is the product of the quantized operands, summed
// in float32 and rounded once; the scale functions see the amax of x, w and dy.
BOOST_AUTO_TEST_CASE(forward_and_backward_use_the_quantized_operands) {
    const std::size_t batch = 6, in = 40, out = 7;
    for (const Dtype dtype : {Dtype::float32, Dtype::bfloat16}) {
        const Tensor x = random_tensor(Shape{batch, in}, 3.0f, 8, dtype);
        const Tensor w = random_tensor(Shape{in, out}, 0.2f, 9, dtype);
        const Tensor dy = random_tensor(Shape{batch, out}, 1e-3f, 10, dtype);
        float seen_x = -1, seen_w = -1, seen_g = -1;
        const float sx = 448.0f / kernels::amax(x), sw = 448.0f / kernels::amax(w), sg = 57344.0f / kernels::amax(dy);
        const Fp8DenseCasts casts{fixed(Dtype::float8_e4m3, sx, &seen_x), fixed(Dtype::float8_e4m3, sw, &seen_w),
                                  fixed(Dtype::float8_e5m2, sg, &seen_g)};
        GradientTape tape;
        tape.watch(x);
        tape.watch(w);
        const Tensor y = dense_fp8(x, w, std::nullopt, casts);
        const std::vector<Tensor> g = tape.gradient(y * dy, {x, w});
        BOOST_TEST(seen_x == kernels::amax(x));
        BOOST_TEST(seen_w == kernels::amax(w));
        BOOST_TEST(seen_g == kernels::amax(dy));
        BOOST_TEST(y.dtype() == dtype);
        BOOST_TEST(g[0].dtype() == dtype);
        BOOST_TEST(g[1].dtype() == dtype);

        const std::vector<float> qx = kernels::quantize(x, sx, Dtype::float8_e4m3).to_floats();
        const std::vector<float> qw = kernels::quantize(w, sw, Dtype::float8_e4m3).to_floats();
        const std::vector<float> qg = kernels::quantize(dy, sg, Dtype::float8_e5m2).to_floats();
        check_product(y, qx, qw, batch, in, out, false, (1.0 / sx) * (1.0 / sw));
        check_product(g[0], qg, qw, batch, out, in, true, (1.0 / sg) * (1.0 / sw)); // dx = q_g q_wᵀ
        std::vector<float> qx_t(in * batch), qg_t(out * batch);                     // dw = q_xᵀ q_g
        for (std::size_t i = 0; i < batch; ++i) {
            for (std::size_t p = 0; p < in; ++p) qx_t[p * batch + i] = qx[i * in + p];
            for (std::size_t j = 0; j < out; ++j) qg_t[j * batch + i] = qg[i * out + j];
        }
        check_product(g[1], qx_t, qg_t, in, batch, out, true, (1.0 / sx) * (1.0 / sg));
    }
}

// Current scaling keeps far more of a tiny gradient than an unscaled e5m2 cast, which loses it to
// underflow: the reason FP8 gradients need a scale.
BOOST_AUTO_TEST_CASE(scaling_saves_small_gradients) {
    const Tensor x = random_tensor(Shape{8, 32}, 1.0f, 11), w = random_tensor(Shape{32, 4}, 1.0f, 12);
    const Tensor dy = random_tensor(Shape{8, 4}, 1e-6f, 13);
    const auto kernel_gradient = [&](Fp8Cast grad) {
        GradientTape tape;
        tape.watch(w);
        const Tensor y =
            dense_fp8(x, w, std::nullopt, {current(Dtype::float8_e4m3), current(Dtype::float8_e4m3), grad});
        return tape.gradient(y * dy, {w})[0];
    };
    const Tensor scaled = kernel_gradient(current(Dtype::float8_e5m2));
    const Tensor unscaled = kernel_gradient(fixed(Dtype::float8_e5m2, 1.0f));
    std::size_t zeros = 0;
    for (float v : unscaled.to_floats()) zeros += v == 0.0f;
    BOOST_TEST(zeros == unscaled.size()); // |dy| < 2^-17: every value underflows e5m2
    for (float v : scaled.to_floats()) BOOST_TEST(v != 0.0f);
}

// Gradients below half of e5m2's smallest subnormal all round to zero to nearest; rounded
// stochastically, they survive on average: the kernel gradient Σ_batch x·dy keeps its expectation.
BOOST_AUTO_TEST_CASE(stochastic_rounding_keeps_small_gradients_on_average) {
    const std::size_t batch = 4096;
    const Tensor x = Tensor::full(Shape{batch, 1}, 1.0f), w = Tensor::full(Shape{1, 1}, 1.0f);
    const Tensor dy = Tensor::full(Shape{batch, 1}, 0x1p-19f); // 1/8 of the smallest subnormal, 2^-16
    const auto kernel_gradient = [&](Fp8Cast grad) {
        GradientTape tape;
        tape.watch(w);
        const Tensor y =
            dense_fp8(x, w, std::nullopt, {fixed(Dtype::float8_e4m3, 1.0f), fixed(Dtype::float8_e4m3, 1.0f), grad});
        return tape.gradient(y * dy, {w})[0].flat(0);
    };
    BOOST_TEST(kernel_gradient(fixed(Dtype::float8_e5m2, 1.0f)) == 0.0f);
    Fp8Cast stochastic = fixed(Dtype::float8_e5m2, 1.0f);
    stochastic.stochastic = 42;
    const double got = kernel_gradient(stochastic), want = double(batch) * 0x1p-19;
    // Each value becomes 2^-16 with probability 1/8: a binomial count of 2^-16 steps.
    const double sigma = std::sqrt(batch * 0.125 * 0.875) * 0x1p-16;
    BOOST_TEST(std::fabs(got - want) <= 6 * sigma, got << " against " << want);
    BOOST_TEST(kernel_gradient(stochastic) == got); // the same stream, the same draws
}

// An observed cast reports what its rounding did to x · s: saturated values count as overflow.
BOOST_AUTO_TEST_CASE(an_observed_cast_reports_its_rounding) {
    const Tensor x = Tensor::from_floats(Shape{2, 3}, std::vector<float>{1000.0f, -500.0f, 1e-4f, 1.0f, 0.0f, 3.0f});
    const Tensor w = Tensor::full(Shape{3, 2}, 1.0f);
    std::vector<RoundingStats> seen;
    Fp8Cast input = fixed(Dtype::float8_e4m3, 1.0f);
    input.observe = [&](const RoundingStats& s) { seen.push_back(s); };
    RoundingRecorder outer;
    dense_fp8(x, w, std::nullopt, {input, fixed(Dtype::float8_e4m3, 1.0f), fixed(Dtype::float8_e5m2, 1.0f)});
    BOOST_TEST_REQUIRE(seen.size() == 1u);
    BOOST_TEST(seen[0].count == 6u);
    BOOST_TEST(seen[0].overflow == 2u);  // 1000 and -500 saturate at ±448
    BOOST_TEST(seen[0].underflow == 1u); // 1e-4 is below half of e4m3's smallest subnormal, 2^-9
    BOOST_TEST(seen[0].zeros == 1u);
    BOOST_TEST(seen[0].amax == 1000.0f);
    BOOST_TEST(outer.total().count == 12u); // the recorder outside still sees both casts
}

BOOST_AUTO_TEST_CASE(errors_name_what_is_wrong) {
    const Tensor x(Shape{2, 3}), w(Shape{3, 4});
    const auto message_has = [](const char* part) {
        return [part](const std::exception& e) { return std::string(e.what()).find(part) != std::string::npos; };
    };
    BOOST_CHECK_EXCEPTION(dense_fp8(x, w, std::nullopt, {}), std::invalid_argument, message_has("input"));
    const Fp8DenseCasts negative{fixed(Dtype::float8_e4m3, 1.0f), fixed(Dtype::float8_e4m3, -2.0f),
                                 fixed(Dtype::float8_e5m2, 1.0f)};
    BOOST_CHECK_EXCEPTION(dense_fp8(x, w, std::nullopt, negative), std::invalid_argument, message_has("kernel"));
    const Fp8DenseCasts ok{fixed(Dtype::float8_e4m3, 1.0f), fixed(Dtype::float8_e4m3, 1.0f),
                           fixed(Dtype::float8_e5m2, 1.0f)};
    BOOST_CHECK_EXCEPTION(dense_fp8(x, Tensor(Shape{3}), std::nullopt, ok), shape_error, message_has("(3)"));
    BOOST_CHECK_EXCEPTION(dense_fp8(x, Tensor(Shape{4, 4}), std::nullopt, ok), shape_error, message_has("(2, 3)"));
}

// ---- Convolutions in FP8 (conv2d_fp8) ----

// On either backend, each result is conv2d's float32 sums of the quantized operands, times its
// 1/(s_a s_b), plus the bias, rounded once; the bias gradient is summed from dy itself.
BOOST_AUTO_TEST_CASE(conv_products_are_those_of_the_quantized_operands) {
    for (const ConvBackend backend :
         {ConvBackend::im2col, ConvBackend::im2col_onednn, ConvBackend::onednn, ConvBackend::measured})
        for (const Dtype dtype : {Dtype::float32, Dtype::bfloat16}) {
            const Tensor x = random_tensor(Shape{2, 3, 7, 7}, 3.0f, 31, dtype);
            const Tensor w = random_tensor(Shape{4, 3, 3, 3}, 0.2f, 32, dtype);
            const Tensor b = random_tensor(Shape{4}, 0.5f, 33, dtype);
            const Tensor dy = random_tensor(Shape{2, 4, 5, 5}, 1e-3f, 34, dtype);
            const float sx = 448.0f / kernels::amax(x), sw = 448.0f / kernels::amax(w);
            const float sg = 57344.0f / kernels::amax(dy);
            const Fp8DenseCasts casts{fixed(Dtype::float8_e4m3, sx), fixed(Dtype::float8_e4m3, sw),
                                      fixed(Dtype::float8_e5m2, sg)};
            Conv2dOptions options;
            options.backend = backend;
            GradientTape tape;
            for (const Tensor* t : {&x, &w, &b}) tape.watch(*t);
            const Tensor y = conv2d_fp8(x, w, b, casts, options);
            const std::vector<Tensor> g = tape.gradient(y * dy, {x, w, b});

            // The reference: float32 convolutions of the FP8 values, scaled and rounded here.
            const auto widened = [](const Tensor& q) { return Tensor::from_floats(q.shape(), q.to_floats()); };
            const Tensor qx = widened(kernels::quantize(x, sx, Dtype::float8_e4m3));
            const Tensor qw = widened(kernels::quantize(w, sw, Dtype::float8_e4m3));
            const Tensor qg = widened(kernels::quantize(dy, sg, Dtype::float8_e5m2));
            GradientTape reference;
            reference.watch(qx);
            reference.watch(qw);
            const Tensor sums = conv2d(qx, qw, std::nullopt, options);
            const std::vector<Tensor> dsums = reference.gradient(sums * qg, {qx, qw});
            const auto scaled = [&](const Tensor& t, float alpha, const std::vector<float>* bias) {
                std::vector<float> v = t.to_floats();
                const std::size_t per = bias ? v.size() / (2 * 4) : 1;
                for (std::size_t i = 0; i < v.size(); ++i) v[i] = v[i] * alpha + (bias ? (*bias)[i / per % 4] : 0.0f);
                return Tensor::from_floats(t.shape(), v, dtype);
            };
            const std::vector<float> bias = b.to_floats();
            BOOST_TEST(same_bits(y, scaled(sums, (1.0f / sx) * (1.0f / sw), &bias)));
            BOOST_TEST(same_bits(g[0], scaled(dsums[0], (1.0f / sg) * (1.0f / sw), nullptr)));
            BOOST_TEST(same_bits(g[1], scaled(dsums[1], (1.0f / sx) * (1.0f / sg), nullptr)));
            std::vector<float> db(4, 0.0f);
            const std::vector<float> d = dy.to_floats();
            for (std::size_t n = 0; n < 2; ++n)
                for (std::size_t o = 0; o < 4; ++o) {
                    float sum = 0;
                    for (std::size_t i = 0; i < 25; ++i) sum += d[(n * 4 + o) * 25 + i];
                    db[o] += sum;
                }
            BOOST_TEST(same_bits(g[2], Tensor::from_floats(Shape{4}, db, dtype)));
        }
}

// Conv2dOptions::relu in FP8 gives relu(conv2d_fp8(…)) bit for bit: the ReLU's mask applies to the
// output gradient before its FP8 cast, and to the bias gradient summed from it.
BOOST_AUTO_TEST_CASE(conv_relu_is_relu_of_conv2d_fp8_bit_for_bit) {
    for (const ConvBackend backend :
         {ConvBackend::im2col, ConvBackend::im2col_onednn, ConvBackend::onednn, ConvBackend::measured}) {
        const Tensor x = random_tensor(Shape{2, 3, 7, 7}, 3.0f, 51, Dtype::bfloat16);
        const Tensor w = random_tensor(Shape{4, 3, 3, 3}, 0.2f, 52, Dtype::bfloat16);
        const Tensor b = random_tensor(Shape{4}, 0.5f, 53, Dtype::bfloat16);
        const Tensor dy = random_tensor(Shape{2, 4, 5, 5}, 1e-3f, 54, Dtype::bfloat16);
        const Fp8DenseCasts casts{fixed(Dtype::float8_e4m3, 64.0f), fixed(Dtype::float8_e4m3, 1024.0f),
                                  fixed(Dtype::float8_e5m2, 1024.0f)};
        const auto run = [&](bool fused) {
            Conv2dOptions options{.backend = backend, .relu = fused};
            GradientTape tape;
            for (const Tensor* t : {&x, &w, &b}) tape.watch(*t);
            const Tensor y = fused ? conv2d_fp8(x, w, b, casts, options) : relu(conv2d_fp8(x, w, b, casts, options));
            std::vector<Tensor> out = tape.gradient(y * dy, {x, w, b});
            out.push_back(y);
            return out;
        };
        const std::vector<Tensor> plain = run(false), fused = run(true);
        for (std::size_t i = 0; i < plain.size(); ++i) BOOST_TEST(same_bits(fused[i], plain[i]), "result " << i);
    }
}

// Integer operands with power-of-two scales cast exactly: conv2d_fp8 gives conv2d's results bit for bit.
BOOST_AUTO_TEST_CASE(conv_exact_operands_give_conv2d_bit_for_bit) {
    const auto integers = [](const Shape& shape, int range, unsigned seed) {
        return integer_tensor(shape, range, seed, Dtype::bfloat16);
    };
    const Tensor x = integers(Shape{2, 2, 6, 6}, 8, 41), w = integers(Shape{3, 2, 3, 3}, 4, 42);
    const Tensor b = integers(Shape{3}, 9, 43), dy = integers(Shape{2, 3, 4, 4}, 3, 44);
    const Fp8DenseCasts casts{fixed(Dtype::float8_e4m3, 4.0f), fixed(Dtype::float8_e4m3, 8.0f),
                              fixed(Dtype::float8_e5m2, 0.25f)};
    const auto run = [&](bool fp8) {
        GradientTape tape;
        for (const Tensor* t : {&x, &w, &b}) tape.watch(*t);
        const Tensor y = fp8 ? conv2d_fp8(x, w, b, casts) : conv2d(x, w, b);
        std::vector<Tensor> out = tape.gradient(y * dy, {x, w, b});
        out.push_back(y);
        return out;
    };
    const std::vector<Tensor> plain = run(false), fp8 = run(true);
    for (std::size_t i = 0; i < plain.size(); ++i) BOOST_TEST(same_bits(fp8[i], plain[i]), "result " << i);
    BOOST_CHECK_THROW(conv2d_fp8(x, w, b, {}), std::invalid_argument);
}

// ---- MXFP8 products (dense_mxfp8) ----

namespace {

/// t (rows, cols) as floats, transposed: (cols, rows).
std::vector<float> transposed(const std::vector<float>& t, std::size_t rows, std::size_t cols) {
    std::vector<float> out(t.size());
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) out[c * rows + r] = t[r * cols + c];
    return out;
}

/// The raw MX rounding (mx.hpp, tested exhaustively in test_mx) of (rows, cols) floats along their rows.
std::vector<float> mx_rows(std::vector<float> t, std::size_t rows, std::size_t cols, Dtype element) {
    mx_round(t.data(), rows, cols, element, t.data());
    return t;
}

} // namespace

// The tensor kernels round along the last axis, or down the columns, exactly as the raw rounding does
// row by row (on the transpose, for columns): in any dtype, with ragged last blocks, split over threads.
BOOST_AUTO_TEST_CASE(mx_round_kernels_follow_the_raw_rounding) {
    const std::size_t rows = 301, cols = 70;
    for (const Dtype dtype : {Dtype::float32, Dtype::bfloat16})
        for (const Dtype element : {Dtype::float8_e4m3, Dtype::float8_e5m2}) {
            const Tensor x = random_tensor(Shape{rows, cols}, 3.0f, 20, dtype);
            const std::vector<float> v = x.to_floats();
            const Tensor r = kernels::mx_round(x.reshape(Shape{7, 43, cols}), element);
            BOOST_TEST(r.dtype() == Dtype::float32);
            BOOST_TEST((r.shape() == Shape{7, 43, cols}));
            BOOST_TEST(r.to_floats() == mx_rows(v, rows, cols, element), boost::test_tools::per_element());
            const Tensor t = kernels::mx_round_columns(x, element);
            BOOST_TEST((t.shape() == Shape{rows, cols}));
            BOOST_TEST(transposed(t.to_floats(), rows, cols) == mx_rows(transposed(v, rows, cols), cols, rows, element),
                       boost::test_tools::per_element());
            if (dtype == Dtype::float32) BOOST_TEST(x.to_floats() == v); // the input is left alone
        }
    BOOST_CHECK_THROW(kernels::mx_round(Tensor(Shape{2, 3}), Dtype::bfloat16), std::invalid_argument);
    BOOST_CHECK_THROW(kernels::mx_round_columns(Tensor(Shape{2, 3}), Dtype::float16), std::invalid_argument);
    BOOST_CHECK_THROW(kernels::mx_round_columns(Tensor(Shape{2, 3, 4}), Dtype::float8_e4m3), shape_error);
    BOOST_TEST(kernels::mx_round(Tensor(Shape{0, 5}), Dtype::float8_e4m3).size() == 0u);
}

// Integers in [-8, 8] are exact in MX blocks of either element format (every block's amax a is 1..8, so
// each value v becomes v · 2^(emax − ⌊log2 a⌋) ≤ 1.75 · 2^emax with at most 3 significant bits), so the
// MX products and their gradients equal dense's bit for bit: the roundings pass gradients straight through.
BOOST_AUTO_TEST_CASE(mx_exact_operands_give_dense_bit_for_bit) {
    const auto integers = [](const Shape& shape, unsigned seed) {
        std::mt19937 gen(seed);
        std::uniform_int_distribution<int> dist(-8, 8);
        std::vector<float> v(shape.elements());
        for (float& x : v) x = float(dist(gen));
        return Tensor::from_floats(shape, v);
    };
    const Tensor x = integers(Shape{4, 9, 70}, 21), w = integers(Shape{70, 37}, 22), b = integers(Shape{37}, 23);
    const Tensor c = integers(Shape{4, 9, 37}, 24); // dy
    check_equals_dense([](const Tensor& x_, const Tensor& w_, const Tensor& b_) { return dense_mxfp8(x_, w_, b_); }, x,
                       w, b, c);
}

// Random operands: y, dx and dw are products of the operands rounded in MX blocks along the summed axis
// (x and w along `in`, dy and w along `out`, x and dy along the batch), summed in float32 and rounded once.
BOOST_AUTO_TEST_CASE(mx_forward_and_backward_round_along_the_summed_axis) {
    const std::size_t batch = 40, in = 70, out = 33;
    for (const Dtype dtype : {Dtype::float32, Dtype::bfloat16}) {
        const Tensor x = random_tensor(Shape{batch, in}, 3.0f, 25, dtype);
        const Tensor w = random_tensor(Shape{in, out}, 0.2f, 26, dtype);
        const Tensor dy = random_tensor(Shape{batch, out}, 1e-3f, 27, dtype);
        GradientTape tape;
        tape.watch(x);
        tape.watch(w);
        const Tensor y = dense_mxfp8(x, w, std::nullopt);
        const std::vector<Tensor> g = tape.gradient(y * dy, {x, w});
        BOOST_TEST(y.dtype() == dtype);
        BOOST_TEST(g[0].dtype() == dtype);
        BOOST_TEST(g[1].dtype() == dtype);
        const std::vector<float> xs = x.to_floats(), ws = w.to_floats(), gs = dy.to_floats();
        const Dtype e4m3 = Dtype::float8_e4m3, e5m2 = Dtype::float8_e5m2;
        // y = mx(x, in) · mx(w, in): the second operand stored (out, in).
        check_product(y, mx_rows(xs, batch, in, e4m3), mx_rows(transposed(ws, in, out), out, in, e4m3), batch, in, out,
                      true, 1.0);
        // dx = mx(dy, out) · mx(w, out)ᵀ: w's rows are (in, out).
        check_product(g[0], mx_rows(gs, batch, out, e5m2), mx_rows(ws, in, out, e4m3), batch, out, in, true, 1.0);
        // dw = mx(x, batch)ᵀ · mx(dy, batch): both stored transposed, blocks along the batch.
        check_product(g[1], mx_rows(transposed(xs, batch, in), in, batch, e4m3),
                      mx_rows(transposed(gs, batch, out), out, batch, e5m2), in, batch, out, true, 1.0);
    }
}

// Per-block scales keep a gradient far below e5m2's range (2^-16 and less), which an unscaled cast loses.
BOOST_AUTO_TEST_CASE(mx_blocks_keep_small_gradients) {
    const Tensor x = random_tensor(Shape{64, 32}, 1.0f, 28), w = random_tensor(Shape{32, 4}, 1.0f, 29);
    const Tensor dy = random_tensor(Shape{64, 4}, 1e-12f, 30);
    GradientTape tape;
    tape.watch(w);
    const Tensor dw = tape.gradient(dense_mxfp8(x, w, std::nullopt) * dy, {w})[0];
    for (float v : dw.to_floats()) BOOST_TEST(v != 0.0f);
    BOOST_CHECK_EXCEPTION(dense_mxfp8(x, Tensor(Shape{32}), std::nullopt), shape_error,
                          [](const shape_error& e) { return std::string(e.what()).find("(32)") != std::string::npos; });
    BOOST_CHECK_THROW(dense_mxfp8(x, w, std::nullopt, {.input = Dtype::bfloat16}), std::invalid_argument);
}
