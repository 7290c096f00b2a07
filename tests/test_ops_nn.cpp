#define BOOST_TEST_MODULE ops_nn
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"

#include <cmath>
#include <cstring>
#include <random>

using namespace mixprec::autodiff;

namespace {

Tensor random(const Shape& shape, float lo, float hi, unsigned seed) { return op_checks::uniform(shape, lo, hi, seed); }

// Half-precision tolerances, relative to the largest float32 gradient of each input: the output and each
// gradient are rounded once in the format (2^-11 for float16, 2^-8 for bfloat16), and the seed dy = w of
// the gradient check is itself rounded to the format, so a gradient combines two or three roundings;
// allow 8 units (layer_norm, whose dx cancels the mean and x̂ components of γ dy, needs 4 here).
constexpr double f16_tol = 8 * 0x1p-11, bf16_tol = 8 * 0x1p-8;

void check(const std::string& name, const Function& f, const std::vector<Tensor>& inputs) {
    op_checks::check_gradients(name, f, inputs, f16_tol, bf16_tol);
}

using op_checks::throws_with;

} // namespace

BOOST_AUTO_TEST_CASE(layer_norm_gradients) {
    const auto f = [](const auto& in) { return layer_norm(in[0], in[1], in[2]); };
    check("layer_norm (3, 5)", f,
          {random(Shape{3, 5}, 0.1f, 2.0f, 1), random(Shape{5}, 0.5f, 1.5f, 2), random(Shape{5}, 0.1f, 1.0f, 3)});
    check("layer_norm (2, 2, 4)", f,
          {random(Shape{2, 2, 4}, 0.1f, 2.0f, 4), random(Shape{4}, 0.5f, 1.5f, 5), random(Shape{4}, 0.1f, 1.0f, 6)});
    check("layer_norm eps 0.1", [](const auto& in) { return layer_norm(in[0], in[1], in[2], 0.1f); },
          {random(Shape{2, 6}, 0.1f, 1.0f, 7), random(Shape{6}, 0.5f, 1.5f, 8), random(Shape{6}, 0.1f, 1.0f, 9)});
}

// Rows spread over the threads in blocks (columns, for dγ and dβ) give the bits of the row-by-row loops
// written out here: y, dx, dγ and dβ each summed in float32 in the same order and rounded once. Shapes
// with many rows per block, and rows longer than a block.
BOOST_AUTO_TEST_CASE(layer_norm_in_blocks_gives_the_bits_of_row_by_row) {
    for (const Shape& shape : {Shape{3000, 40}, Shape{6, 3000}})
        for (Dtype dtype : {Dtype::float32, Dtype::float16}) {
            const std::size_t d = shape[1], rows = shape[0];
            const Tensor x = random(shape, -2.0f, 2.0f, 21).to(dtype), dy = random(shape, -1.0f, 1.0f, 22).to(dtype);
            const Tensor gamma = random(Shape{d}, 0.5f, 1.5f, 23).to(dtype),
                         beta = random(Shape{d}, -1.0f, 1.0f, 24).to(dtype);
            GradientTape tape;
            for (const Tensor* t : {&x, &gamma, &beta}) tape.watch(*t);
            const Tensor y = layer_norm(x, gamma, beta);
            const std::vector<Tensor> grads = tape.gradient(mul(y, dy), std::vector<Tensor>{x, gamma, beta});

            const std::vector<float> xs = x.to_floats(), ds = dy.to_floats(), g = gamma.to_floats(),
                                     b = beta.to_floats();
            std::vector<float> xhat(xs.size()), want_y(xs.size()), want_dx(xs.size()), dg(d, 0.0f), db(d, 0.0f), gx(d);
            for (std::size_t r = 0; r < rows; ++r) {
                const float* xr = xs.data() + r * d;
                float mean = 0, var = 0;
                for (std::size_t j = 0; j < d; ++j) mean += xr[j];
                mean /= static_cast<float>(d);
                for (std::size_t j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
                var /= static_cast<float>(d);
                const float rstd = 1.0f / std::sqrt(var + 1e-5f);
                float mean_g = 0, mean_gx = 0;
                for (std::size_t j = 0; j < d; ++j) {
                    xhat[r * d + j] = (xr[j] - mean) * rstd;
                    want_y[r * d + j] = g[j] * xhat[r * d + j] + b[j];
                    gx[j] = g[j] * ds[r * d + j];
                    mean_g += gx[j];
                    mean_gx += gx[j] * xhat[r * d + j];
                    dg[j] += ds[r * d + j] * xhat[r * d + j];
                    db[j] += ds[r * d + j];
                }
                mean_g /= static_cast<float>(d);
                mean_gx /= static_cast<float>(d);
                for (std::size_t j = 0; j < d; ++j)
                    want_dx[r * d + j] = rstd * (gx[j] - mean_g - xhat[r * d + j] * mean_gx);
            }
            const auto same = [dtype](const Tensor& got, const Shape& s, const std::vector<float>& want) {
                const Tensor w = Tensor::from_floats(s, want, dtype);
                return std::memcmp(got.raw(), w.raw(), w.nbytes()) == 0;
            };
            BOOST_TEST_CONTEXT(shape.to_string() << " " << name_of(dtype)) {
                BOOST_TEST(same(y, shape, want_y));
                BOOST_TEST(same(grads[0], shape, want_dx));
                BOOST_TEST(same(grads[1], Shape{d}, dg));
                BOOST_TEST(same(grads[2], Shape{d}, db));
            }
        }
}

// Before gamma/beta each row has mean 0 and variance σ²/(σ² + ε); then y = γ x̂ + β elementwise.
BOOST_AUTO_TEST_CASE(layer_norm_normalizes_rows) {
    const Tensor x = random(Shape{4, 8}, 0.5f, 3.0f, 11);
    const Tensor y = layer_norm(x, Tensor::full(Shape{8}, 1.0f), Tensor(Shape{8}));
    const Tensor gamma = random(Shape{8}, 0.5f, 1.5f, 12), beta = random(Shape{8}, 0.5f, 1.5f, 13);
    const Tensor z = layer_norm(x, gamma, beta);
    for (std::size_t r = 0; r < 4; ++r) {
        double mean = 0, var = 0, xm = 0, xv = 0;
        for (std::size_t j = 0; j < 8; ++j) mean += y.at({r, j}) / 8.0, xm += x.at({r, j}) / 8.0;
        for (std::size_t j = 0; j < 8; ++j)
            var += std::pow(y.at({r, j}) - mean, 2) / 8.0, xv += std::pow(x.at({r, j}) - xm, 2) / 8.0;
        BOOST_TEST(std::fabs(mean) < 1e-6);
        BOOST_TEST(var == xv / (xv + 1e-5), boost::test_tools::tolerance(1e-5));
        for (std::size_t j = 0; j < 8; ++j)
            BOOST_TEST(z.at({r, j}) == gamma.flat(j) * y.at({r, j}) + beta.flat(j),
                       boost::test_tools::tolerance(1e-5f));
    }
    const Tensor h = layer_norm(x.to(Dtype::float16), gamma.to(Dtype::float16), beta.to(Dtype::float16));
    BOOST_TEST(h.dtype() == Dtype::float16);
    BOOST_TEST(h.shape() == x.shape());
}

BOOST_AUTO_TEST_CASE(layer_norm_errors) {
    const Tensor x(Shape{2, 3}), p(Shape{3});
    BOOST_TEST((throws_with<shape_error>([&] { layer_norm(Tensor(), p, p); }, {"()"})));
    BOOST_TEST((throws_with<shape_error>([&] { layer_norm(x, Tensor(Shape{2}), p); }, {"(2)", "(3)", "(2, 3)"})));
    BOOST_TEST((throws_with<shape_error>([&] { layer_norm(x, p, Tensor(Shape{1, 3})); }, {"(1, 3)"})));
    BOOST_TEST((throws_with<dtype_error>([&] { layer_norm(x, p.to(Dtype::float16), p); }, {"float16"})));
}

BOOST_AUTO_TEST_CASE(embedding_gradients) {
    static const std::vector<std::int32_t> ids{1, 3, 1, 0, 1, 4}; // 2 never used, 1 three times
    check("embedding",
          [](const auto& in) {
              return embedding(in[0], ids, Shape{2, 3});
          },
          {random(Shape{5, 3}, 0.1f, 2.0f, 20)});
}

// Rows are copied bit for bit; the gradient of Σ y counts how often each row was looked up.
BOOST_AUTO_TEST_CASE(embedding_copies_rows_and_accumulates) {
    const Tensor table = random(Shape{4, 3}, 0.1f, 2.0f, 21).to(Dtype::float16);
    const std::vector<std::int32_t> ids{2, 0, 2, 2, 3};
    GradientTape tape;
    tape.watch(table);
    const Tensor y = embedding(table, ids, Shape{5});
    BOOST_TEST(y.shape() == (Shape{5, 3}));
    BOOST_TEST(y.dtype() == Dtype::float16);
    for (std::size_t i = 0; i < ids.size(); ++i)
        BOOST_TEST(std::memcmp(static_cast<const std::byte*>(y.raw()) + i * 6,
                               static_cast<const std::byte*>(table.raw()) + ids[i] * 6, 6) == 0);
    const Tensor g = tape.gradient(y, {table})[0];
    BOOST_TEST(g.dtype() == Dtype::float16);
    const float counts[4] = {1, 0, 3, 1};
    for (std::size_t v = 0; v < 4; ++v)
        for (std::size_t j = 0; j < 3; ++j) BOOST_TEST(g.at({v, j}) == counts[v]);

    const std::int32_t one = 3;
    const Tensor s = embedding(table, std::span(&one, 1), Shape{});
    BOOST_TEST(s.shape() == (Shape{3}));
    BOOST_TEST(s.at({1}) == table.at({3, 1}));
}

BOOST_AUTO_TEST_CASE(embedding_errors) {
    const Tensor table(Shape{4, 2});
    const std::vector<std::int32_t> bad{0, 1, 4}, negative{-2}, two{0, 1};
    BOOST_TEST((throws_with<std::invalid_argument>([&] { embedding(table, bad, Shape{3}); },
                                                   {"position 2", "is 4", "[0, 4)"})));
    BOOST_TEST(
        (throws_with<std::invalid_argument>([&] { embedding(table, negative, Shape{1}); }, {"position 0", "-2"})));
    BOOST_TEST((throws_with<shape_error>([&] { embedding(table, two, Shape{3}); }, {"2 ids", "(3)"})));
    BOOST_TEST((throws_with<shape_error>([&] { embedding(Tensor(Shape{4}), two, Shape{2}); }, {"(4)"})));
}

// Each evaluation draws from a fresh Rng with the same seed, so the finite differences see one mask.
BOOST_AUTO_TEST_CASE(dropout_gradients) {
    check("dropout 0.3",
          [](const auto& in) {
              Rng rng(42);
              return dropout(in[0], 0.3f, rng);
          },
          {random(Shape{4, 5}, 0.1f, 2.0f, 30)});
    check("dropout 0.5",
          [](const auto& in) {
              Rng rng(43);
              return dropout(in[0], 0.5f, rng);
          },
          {random(Shape{3, 7}, 0.1f, 2.0f, 31)});
}

// 200,000 draws: the kept fraction has standard deviation √(0.25 · 0.75 / 2e5) ≈ 0.001, so ±0.005 is 5σ;
// the output mean (2/0.75 times that fraction) then stays within 0.7% of the input value 2.
BOOST_AUTO_TEST_CASE(dropout_statistics) {
    const std::size_t n = 200000;
    Rng rng(1);
    const Tensor y = dropout(Tensor::full(Shape{n}, 2.0f), 0.25f, rng);
    const std::vector<float> v = y.to_floats();
    std::size_t kept = 0, wrong = 0;
    double sum = 0;
    for (float u : v) {
        kept += u != 0;
        wrong += u != 0 && u != 2.0f / 0.75f; // kept values are scaled by 1/(1 - rate)
        sum += u;
    }
    BOOST_TEST(wrong == 0u);
    BOOST_TEST(std::fabs(double(kept) / n - 0.75) < 0.005);
    BOOST_TEST(sum / n == 2.0, boost::test_tools::tolerance(0.007));
}

BOOST_AUTO_TEST_CASE(dropout_masks_follow_the_seed) {
    const Tensor x = random(Shape{64}, 0.5f, 1.0f, 32).to(Dtype::bfloat16);
    Rng a(5), b(5), c(6);
    const std::vector<float> ya = dropout(x, 0.5f, a).to_floats(), yb = dropout(x, 0.5f, b).to_floats();
    const std::vector<float> yc = dropout(x, 0.5f, c).to_floats(), next = dropout(x, 0.5f, a).to_floats();
    BOOST_TEST(ya == yb);
    BOOST_TEST(ya != yc);
    BOOST_TEST(ya != next); // the generator advanced
    BOOST_TEST(!(a == b));  // a drew twice, b once

    // The gradient uses the forward mask: 1/(1 - rate) where kept, 0 where dropped.
    Rng d(5);
    GradientTape tape;
    tape.watch(x);
    const Tensor y = dropout(x, 0.5f, d);
    BOOST_TEST(y.dtype() == Dtype::bfloat16);
    const std::vector<float> g = tape.gradient(y, {x})[0].to_floats();
    for (std::size_t i = 0; i < g.size(); ++i) BOOST_TEST(g[i] == (ya[i] != 0 ? 2.0f : 0.0f));
}

BOOST_AUTO_TEST_CASE(dropout_identity_and_errors) {
    const Tensor x = random(Shape{10}, 0.5f, 1.0f, 33);
    Rng rng(9);
    const Rng before = rng;
    BOOST_TEST(dropout(x, 0.5f, rng, false).to_floats() == x.to_floats());
    BOOST_TEST(dropout(x, 0.0f, rng).to_floats() == x.to_floats());
    BOOST_TEST((rng == before)); // nothing drawn
    // Dropped elements are multiplied by 0, so an overflowed (inf) input gives NaN there, never a clean 0.
    for (float u : dropout(Tensor::full(Shape{16}, INFINITY, Dtype::float16), 0.5f, rng).to_floats())
        BOOST_TEST(!std::isfinite(u));
    for (float rate : {1.0f, -0.1f, 1.5f, std::nanf("")})
        BOOST_TEST((throws_with<std::invalid_argument>([&] { dropout(x, rate, rng); }, {"rate"})));
}
