#define BOOST_TEST_MODULE ops_conv
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <mixprec/autodiff/tensor/detail/conv_weights_bf16.hpp>
#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>

#include "error_bounds.hpp"
#include "op_checks.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>

#include <omp.h>

using namespace mixprec::autodiff;

namespace {

const int default_threads = omp_get_max_threads();

Tensor random(const Shape& shape, float lo, float hi, unsigned seed, bool positive = false) {
    return op_checks::uniform(shape, lo, hi, seed, positive);
}

/// Values 0.1 apart in random order: no two within a finite-difference step (≤ 0.01·7.2) of each other,
/// so the max of a window never changes hands during gradcheck.
Tensor distinct(const Shape& shape, unsigned seed) {
    std::vector<float> v(shape.elements());
    for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = 0.1f * (static_cast<float>(i) - 0.5f * static_cast<float>(v.size()));
    std::shuffle(v.begin(), v.end(), std::mt19937(seed));
    return Tensor::from_floats(shape, v);
}

// Tolerances of the half-precision checks, relative to the largest float32 gradient: conv2d and the
// pools round each gradient once, but its input dy = w (the gradcheck weights) is itself rounded in the
// narrow run, so an element of dx or dw carries the rounding of up to O·kh·kw (or N·Ho·Wo) terms of mixed
// sign: a relative error of one unit u per term, on a sum of |terms| a few times larger than the largest
// gradient. 8u covers that (u = 2^-11 for float16, 2^-8 for bfloat16).
constexpr double f16_tol = 8 * 0x1p-11, bf16_tol = 8 * 0x1p-8;

void check(const std::string& name, const Function& f, const std::vector<Tensor>& inputs) {
    op_checks::check_gradients(name, f, inputs, f16_tol, bf16_tol);
}

struct conv_case {
    std::string name;
    Shape x, w;
    bool bias;
    Conv2dOptions options;
};

std::size_t out_size(std::size_t in, std::size_t k, std::size_t s, std::size_t p, std::size_t d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/// The 7-loop definition in double: y[n,o,i,j] = b[o] + Σ_{c,p,q} w[o,c,p,q] x[n,c,i s − pad + p d, ...].
/// With `dy`, also accumulates dx, dw, db by the same loops (for the chunked case).
struct naive {
    std::vector<double> y, dx, dw, db;
    naive(const conv_case& k, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
          const std::vector<float>* dy = nullptr) {
        const auto& o = k.options;
        const std::size_t N = k.x[0], C = k.x[1], H = k.x[2], W = k.x[3], O = k.w[0], KH = k.w[2], KW = k.w[3];
        const std::size_t Ho = out_size(H, KH, o.stride[0], o.padding[0], o.dilation[0]);
        const std::size_t Wo = out_size(W, KW, o.stride[1], o.padding[1], o.dilation[1]);
        y.assign(N * O * Ho * Wo, 0.0), dx.assign(x.size(), 0.0), dw.assign(w.size(), 0.0), db.assign(O, 0.0);
        for (std::size_t n = 0; n < N; ++n)
            for (std::size_t oc = 0; oc < O; ++oc)
                for (std::size_t i = 0; i < Ho; ++i)
                    for (std::size_t j = 0; j < Wo; ++j) {
                        const std::size_t yi = ((n * O + oc) * Ho + i) * Wo + j;
                        double s = b.empty() ? 0.0 : b[oc];
                        const double g = dy ? (*dy)[yi] : 0.0;
                        db[oc] += g;
                        for (std::size_t c = 0; c < C; ++c)
                            for (std::size_t p = 0; p < KH; ++p)
                                for (std::size_t q = 0; q < KW; ++q) {
                                    const long r = long(i * o.stride[0] + p * o.dilation[0]) - long(o.padding[0]);
                                    const long t = long(j * o.stride[1] + q * o.dilation[1]) - long(o.padding[1]);
                                    if (r < 0 || t < 0 || r >= long(H) || t >= long(W)) continue;
                                    const std::size_t xi = ((n * C + c) * H + r) * W + t,
                                                      wi = ((oc * C + c) * KH + p) * KW + q;
                                    s += double(w[wi]) * x[xi];
                                    dx[xi] += g * w[wi];
                                    dw[wi] += g * x[xi];
                                }
                        y[yi] = s;
                    }
    }
};

const std::vector<conv_case>& conv_cases() {
    static const std::vector<conv_case> cases{
        {"plain", Shape{2, 3, 7, 7}, Shape{4, 3, 3, 3}, true, {}},
        {"stride 2", Shape{2, 3, 8, 9}, Shape{4, 3, 3, 3}, true, {.stride = {2, 2}}},
        {"padding 1", Shape{2, 2, 5, 6}, Shape{3, 2, 3, 3}, true, {.padding = {1, 1}}},
        {"dilation 2", Shape{1, 2, 9, 8}, Shape{3, 2, 3, 3}, true, {.dilation = {2, 2}}},
        {"no bias", Shape{2, 3, 6, 6}, Shape{2, 3, 3, 3}, false, {}},
        {"non-square 2x4", Shape{2, 2, 7, 9}, Shape{3, 2, 2, 4}, true, {.stride = {1, 2}, .padding = {0, 2}}},
        {"C=1 O=1", Shape{3, 1, 6, 5}, Shape{1, 1, 3, 2}, true, {}},
        {"everything",
         Shape{2, 3, 11, 10},
         Shape{5, 3, 3, 2},
         true,
         {.stride = {2, 3}, .padding = {1, 2}, .dilation = {2, 1}}},
        {"1x1 kernel", Shape{2, 4, 3, 3}, Shape{5, 4, 1, 1}, false, {}},
        {"kernel = input", Shape{2, 2, 4, 3}, Shape{3, 2, 4, 3}, true, {}},
        // one channel, 3 × 3: from the avx2 level up, oneDNN's route runs conv_first_layer.hpp's pass (rows
        // of 38 outputs: whole vectors of 16 or 8 lanes and a tail of 6; 17 filters: groups of 4 and one)
        {"one channel 3x3", Shape{3, 1, 9, 40}, Shape{17, 1, 3, 3}, true, {}},
        {"one channel 3x3, no bias", Shape{2, 1, 5, 19}, Shape{4, 1, 3, 3}, false, {}},
    };
    return cases;
}

/// How many elements of t lie farther from the float64 reference than the bound on a float32 sum of k
/// terms with Σ|terms| = magnitude, rounded once to t's dtype (error_bounds.hpp).
std::size_t far_from_sums(const Tensor& t, const std::vector<double>& reference, const std::vector<double>& magnitude,
                          std::size_t k) {
    const std::vector<float> got = t.to_floats();
    std::size_t far = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double r = reference[i];
        if (std::fabs(got[i] - r) > error_bounds::rounded_sum_error(t.dtype(), k, r, magnitude[i]) && ++far <= 3)
            BOOST_TEST_MESSAGE(name_of(t.dtype()) << " element " << i << ": " << got[i] << ", reference " << r);
    }
    return far;
}

Tensor run(const conv_case& k, const Tensor& x, const Tensor& w, const std::optional<Tensor>& b, ConvBackend backend) {
    Conv2dOptions o = k.options;
    o.backend = backend;
    return conv2d(x, w, b, o);
}

/// Every route, named: the default, each backend forced, and the one measured fastest.
const std::vector<std::pair<ConvBackend, const char*>> backends{{ConvBackend::automatic, "automatic"},
                                                                {ConvBackend::im2col, "im2col"},
                                                                {ConvBackend::im2col_onednn, "im2col_onednn"},
                                                                {ConvBackend::onednn, "onednn"},
                                                                {ConvBackend::measured, "measured"}};

using op_checks::same_bits_any_nan;
using op_checks::throws_with;

} // namespace

BOOST_AUTO_TEST_CASE(conv2d_forward_matches_naive_reference) {
    unsigned seed = 100;
    for (const conv_case& k : conv_cases()) {
        const Tensor x = random(k.x, 0.0f, 1.0f, ++seed), w = random(k.w, 0.0f, 1.0f, ++seed);
        const std::optional<Tensor> b =
            k.bias ? std::optional(random(Shape{k.w[0]}, 0.0f, 1.0f, ++seed)) : std::nullopt;
        const naive ref(k, x.to_floats(), w.to_floats(), b ? b->to_floats() : std::vector<float>{});
        // The same loops over |x|, |w|, |b| give Σ|terms| of each sum.
        const naive size(k, kernels::abs(x).to_floats(), kernels::abs(w).to_floats(),
                         b ? kernels::abs(*b).to_floats() : std::vector<float>{});
        const auto& o = k.options;
        for (const auto& [backend, route] : backends) BOOST_TEST_CONTEXT(k.name << ", " << route) {
                const Tensor y = run(k, x, w, b, backend);
                BOOST_TEST(y.dtype() == Dtype::float32);
                BOOST_TEST(y.shape() ==
                           (Shape{k.x[0], k.w[0], out_size(k.x[2], k.w[2], o.stride[0], o.padding[0], o.dilation[0]),
                                  out_size(k.x[3], k.w[3], o.stride[1], o.padding[1], o.dilation[1])}));
                // A float32 sum of C·kh·kw products and the bias.
                BOOST_TEST(far_from_sums(y, ref.y, size.y, k.x[1] * k.w[2] * k.w[3] + 1) == 0u);
            }
    }
}

// Narrow dtypes: the product, the bias and the sum are all float32, so y is the float32 sum rounded once:
// within half a unit in the last place (plus the float32 sum's error) of the double reference.
BOOST_AUTO_TEST_CASE(conv2d_narrow_dtypes_round_once) {
    const conv_case& k = conv_cases()[7];
    for (Dtype dtype : {Dtype::float16, Dtype::bfloat16}) {
        const Tensor x = random(k.x, 0.1f, 1.0f, 200).to(dtype), w = random(k.w, 0.1f, 1.0f, 201).to(dtype);
        const Tensor b = random(Shape{k.w[0]}, 0.1f, 1.0f, 202).to(dtype);
        const naive ref(k, x.to_floats(), w.to_floats(), b.to_floats());
        const naive size(k, kernels::abs(x).to_floats(), kernels::abs(w).to_floats(), kernels::abs(b).to_floats());
        for (const auto& [backend, route] : backends) {
            const Tensor y = run(k, x, w, b, backend);
            BOOST_TEST(y.dtype() == dtype);
            BOOST_TEST(far_from_sums(y, ref.y, size.y, k.x[1] * k.w[2] * k.w[3] + 1) == 0u, name_of(dtype)
                                                                                                << ", " << route);
        }
    }
}

BOOST_AUTO_TEST_CASE(conv2d_gradients) {
    unsigned seed = 300;
    const std::vector<conv_case> cases{
        {"N=2 C=2 5x5 O=3 3x3", Shape{2, 2, 5, 5}, Shape{3, 2, 3, 3}, true, {}},
        {"stride 2 padding 1", Shape{2, 2, 6, 5}, Shape{3, 2, 3, 3}, true, {.stride = {2, 2}, .padding = {1, 1}}},
        {"dilation 2 no bias", Shape{1, 2, 7, 6}, Shape{2, 2, 3, 2}, false, {.dilation = {2, 2}}},
        {"overlapping 2x3 stride (1, 2)",
         Shape{2, 1, 5, 7},
         Shape{2, 1, 2, 3},
         true,
         {.stride = {1, 2}, .padding = {1, 0}}},
    };
    for (const conv_case& k : cases) {
        std::vector<Tensor> in{random(k.x, 0.1f, 1.0f, ++seed), random(k.w, 0.1f, 1.0f, ++seed)};
        if (k.bias) in.push_back(random(Shape{k.w[0]}, 0.1f, 1.0f, ++seed));
        for (const auto& [backend, route] : backends) {
            Conv2dOptions options = k.options;
            options.backend = backend;
            const auto f = [options](const std::vector<Tensor>& t) {
                return conv2d(t[0], t[1], t.size() > 2 ? std::optional(t[2]) : std::nullopt, options);
            };
            check("conv2d " + k.name + " (" + route + ")", f, in);
        }
    }
}

// A batch in several chunks of the column matrix (256Ki elements; 73,728 per image here): images
// 3 + 3 + 1, so the weight gradient adds up over chunks and the last chunk is short.
BOOST_AUTO_TEST_CASE(conv2d_chunked_batch) {
    const conv_case k{"chunked", Shape{7, 2, 64, 64}, Shape{3, 2, 3, 3}, true, {.padding = {1, 1}}};
    // Every term is positive (dy = 1): y sums C·3·3 products and the bias, dx O·3·3 products, dw and db
    // N·64·64 terms over the chunks, all in float32 whatever the dtype (oneDNN for bfloat16 where the
    // CPU has AVX512-BF16), and a bfloat16 result is that sum rounded once.
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
        const Tensor x = random(k.x, 0.5f, 1.5f, 400, true).to(dtype), w = random(k.w, 0.5f, 1.5f, 401, true).to(dtype);
        const Tensor b = random(Shape{3}, 0.5f, 1.5f, 402, true).to(dtype);
        for (const auto& [backend, route] : backends) BOOST_TEST_CONTEXT(name_of(dtype) << ", " << route) {
                GradientTape tape;
                tape.watch(x), tape.watch(w), tape.watch(b);
                const Tensor y = run(k, x, w, b, backend);
                const std::vector<Tensor> g = tape.gradient(y, {x, w, b}); // dy = 1
                const std::vector<float> ones(y.size(), 1.0f);
                const naive ref(k, x.to_floats(), w.to_floats(), b.to_floats(), &ones);
                const std::size_t positions = 7 * 64 * 64; // every term is positive: Σ|terms| = the sum
                BOOST_TEST(far_from_sums(y, ref.y, ref.y, 2 * 3 * 3 + 1) == 0u);
                BOOST_TEST(far_from_sums(g[0], ref.dx, ref.dx, 3 * 3 * 3) == 0u);
                BOOST_TEST(far_from_sums(g[1], ref.dw, ref.dw, positions) == 0u);
                BOOST_TEST(far_from_sums(g[2], ref.db, ref.db, positions) == 0u);
            }
    }
}

// A layer fed with data (x not watched) gets no input gradient computed, on either route, and the
// weight and bias gradients are the very bits it gets when x is watched: padded, and in the shape whose
// backward pass oneDNN's route hands to im2col below avx512 (routes.hpp).
BOOST_AUTO_TEST_CASE(conv2d_skips_the_input_gradient_nobody_wants) {
    for (const conv_case& k :
         {conv_case{"first layer", Shape{3, 1, 9, 9}, Shape{4, 1, 3, 3}, true, {.padding = {1, 1}}},
          conv_case{"first layer, no padding", Shape{3, 1, 9, 21}, Shape{4, 1, 3, 3}, true, {}}})
        for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
            const Tensor x = random(k.x, -1.0f, 1.0f, 500).to(dtype), w = random(k.w, -1.0f, 1.0f, 501).to(dtype);
            const Tensor b = random(Shape{4}, -1.0f, 1.0f, 502).to(dtype);
            for (const auto& [backend, route] : backends)
                BOOST_TEST_CONTEXT(k.name << ", " << name_of(dtype) << ", " << route) {
                    const auto grads = [&](bool watch_x) {
                        GradientTape tape;
                        if (watch_x) tape.watch(x);
                        tape.watch(w), tape.watch(b);
                        const Tensor y = run(k, x, w, b, backend);
                        return tape.gradient_or_none(y * y, {x, w, b});
                    };
                    const auto all = grads(true), without_x = grads(false);
                    BOOST_TEST(all[0].has_value());
                    BOOST_TEST(!without_x[0].has_value());
                    for (std::size_t i : {1, 2}) {
                        BOOST_REQUIRE(without_x[i].has_value());
                        BOOST_TEST(without_x[i]->to_floats() == all[i]->to_floats(), boost::test_tools::per_element());
                    }
                }
        }
}

// Below avx512 oneDNN's route hands a first layer's backward pass (one channel, 3 × 3, stride 1, no
// padding or dilation) to im2col and oneDNN's sgemm (routes.hpp), its forward pass staying
// conv_first_layer.hpp's: dx, dw and dbias are then im2col_onednn's bits, for one dy, with and without the
// fused ReLU. x, w and b are multiples of 1/4 below 2 in magnitude, so that both forward passes sum exactly
// and the ReLU's mask is the same on both. From avx512 up the route runs oneDNN's own backward pass.
BOOST_AUTO_TEST_CASE(first_layer_backward_below_avx512_is_im2col_onednns) {
    const Shape xs{3, 1, 9, 40}, ws{17, 1, 3, 3};
    const auto quarters = [](const Shape& shape, unsigned seed, Dtype dtype) {
        std::vector<float> v = random(shape, -2.0f, 2.0f, seed).to_floats();
        for (float& e : v) e = std::round(e * 4.0f) / 4.0f;
        return Tensor::from_floats(shape, v, dtype);
    };
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16})
        for (bool relu : {false, true}) {
            const Tensor x = quarters(xs, 700, dtype), w = quarters(ws, 701, dtype),
                         b = quarters(Shape{17}, 702, dtype);
            const Tensor dy = random(Shape{3, 17, 7, 38}, -1.0f, 1.0f, 703).to(dtype);
            const auto grads = [&](ConvBackend backend) {
                GradientTape tape;
                tape.watch(x), tape.watch(w), tape.watch(b);
                const Tensor y = conv2d(x, w, b, {.backend = backend, .relu = relu});
                return tape.gradient(mul(y, dy), {x, w, b});
            };
            for (Isa level : available_isas()) {
                if (level < Isa::avx2 || level >= Isa::avx512) continue;
                set_isa(level);
                const auto onednn = grads(ConvBackend::onednn), im2col = grads(ConvBackend::im2col_onednn);
                for (std::size_t i = 0; i < 3; ++i)
                    BOOST_TEST(std::memcmp(onednn[i].raw(), im2col[i].raw(), im2col[i].nbytes()) == 0,
                               name_of(level)
                                   << ", " << name_of(dtype) << (relu ? ", relu" : "") << ", gradient " << i);
            }
            set_isa(max_isa());
        }
}

// Conv2dOptions::relu gives relu(conv2d(…)) bit for bit on every route and dtype: the outputs, and dx, dw
// and dbias for an output gradient with infinities (a masked one gives NaN, as g · 0 does) and negative
// values (masked to -0).
BOOST_AUTO_TEST_CASE(conv2d_relu_is_relu_of_conv2d_bit_for_bit) {
    const Shape xs{6, 3, 9, 9}, ws{5, 3, 3, 3};
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
        const Tensor x = random(xs, -1.0f, 1.0f, 600).to(dtype), w = random(ws, -1.0f, 1.0f, 601).to(dtype);
        const Tensor b = random(Shape{5}, -0.5f, 0.5f, 602).to(dtype);
        std::vector<float> d = random(Shape{6, 5, 9, 9}, -1.0f, 1.0f, 603).to_floats();
        const Tensor finite = Tensor::from_floats(Shape{6, 5, 9, 9}, d, dtype);
        for (std::size_t i = 0; i < d.size(); i += 97) d[i] = i % 2 ? INFINITY : -INFINITY;
        const Tensor infinite = Tensor::from_floats(Shape{6, 5, 9, 9}, d, dtype);
        for (const auto& [backend, route] : backends)
            for (const Tensor* dyp : {&finite, &infinite})
                BOOST_TEST_CONTEXT(name_of(dtype) << ", " << route << (dyp == &finite ? ", finite" : ", with inf")) {
                    const Tensor& dy = *dyp;
                    const auto run_with = [&](bool fused) {
                        Conv2dOptions o{.padding = {1, 1}, .backend = backend, .relu = fused};
                        GradientTape tape;
                        for (const Tensor* t : {&x, &w, &b}) tape.watch(*t);
                        const Tensor y = fused ? conv2d(x, w, b, o) : relu(conv2d(x, w, b, o));
                        std::vector<Tensor> out = tape.gradient(mul(y, dy), std::vector<Tensor>{x, w, b});
                        out.push_back(y);
                        return out;
                    };
                    const std::vector<Tensor> fused = run_with(true), plain = run_with(false);
                    std::size_t zeros = 0;
                    for (float v : plain[3].to_floats()) zeros += v == 0.0f;
                    BOOST_TEST(zeros > 0); // the ReLU masks something
                    for (std::size_t i = 0; i < plain.size(); ++i) {
                        BOOST_TEST_REQUIRE(fused[i].shape() == plain[i].shape());
                        BOOST_TEST(same_bits_any_nan(fused[i], plain[i]), (i < 3 ? "gradient " : "output ") << i);
                    }
                }
    }
}

/// Whether conv2d_max_pool sums a first layer's dw and dbias from the windows (ops_conv_pool.cpp): a few taps,
/// stride 1, no dilation, no padding.
bool windows_pass(const Shape& w, const Conv2dOptions& o) {
    return w[1] * w[2] * w[3] <= 27 && o.stride == std::array<std::size_t, 2>{1, 1} &&
           o.dilation == std::array<std::size_t, 2>{1, 1} && o.padding == std::array<std::size_t, 2>{0, 0};
}

/// Whether a, from the windows, and b, from the two ops, are the same float32 sums up to their order: the
/// same infinities and NaNs, and finite elements within both sums' bounds (error_bounds.hpp) of each other.
/// Filter o's terms are products of its windows' gradients (dy's, N·(Ho/2)·(Wo/2) of them) with inputs
/// of x, so Σ|terms| ≤ max|x|·Σ|dy of o| for dw (x_shape given) and Σ|dy of o| for dbias (x_shape empty).
bool same_sums(const Tensor& a, const Tensor& b, const Shape& x_shape, const Tensor& x, const Tensor& dy) {
    const std::vector<float> fa = a.to_floats(), fb = b.to_floats(), xs = x.to_floats(), ds = dy.to_floats();
    const std::size_t filters = dy.shape()[1], plane = dy.shape()[2] * dy.shape()[3];
    const std::size_t terms = dy.shape()[0] * plane * 4; // the two ops' dense sums, zeros included
    double largest_x = 0;
    for (float v : xs) largest_x = std::max(largest_x, double(std::fabs(v)));
    std::vector<double> size(filters, 0.0);
    for (std::size_t i = 0; i < ds.size(); ++i) size[i / plane % filters] += std::fabs(ds[i]);
    for (std::size_t i = 0; i < fa.size(); ++i) {
        const double magnitude = size[i * filters / fa.size()] * (x_shape.rank() ? largest_x : 1.0);
        if (!std::isfinite(fa[i]) || !std::isfinite(fb[i])) {
            if (std::isnan(fa[i]) != std::isnan(fb[i]) || (!std::isnan(fa[i]) && fa[i] != fb[i])) return false;
            continue;
        }
        if (std::fabs(double(fa[i]) - fb[i]) > 2 * error_bounds::rounded_sum_error(a.dtype(), terms, fb[i], magnitude))
            return false;
    }
    return true;
}

// conv2d_max_pool gives max_pool2d(conv2d(…), {2, 2}) bit for bit on every pinned route and dtype (the
// measured routes: conv2d_max_pool_measures_its_routes): the pooled outputs, and dx, dw and dbias (a
// first layer's dw and dbias from the windows: the same sums in another order, same_sums), with
// and without the ReLU and the bias, for even and odd outputs (26 → 13, 11 → 5, 7 → 3: an odd last row and column in no window),
// with padding and stride, with and without the input's gradient, for an output gradient with infinities
// and negative values; channel counts that fill oneDNN's blocks of 16 and that leave them part empty (dx
// handed over in them: blocked.hpp).
BOOST_AUTO_TEST_CASE(conv2d_max_pool_is_max_pool_of_conv2d_bit_for_bit) {
    struct pool_case {
        Shape x, w;
        Conv2dOptions options;
    };
    const std::vector<pool_case> cases{{{5, 1, 28, 28}, {4, 1, 3, 3}, {}},
                                       {{3, 6, 13, 13}, {7, 6, 3, 3}, {}},
                                       // a first layer with 17 windows a row (two vectors of them) and an
                                       // odd last column; 5 filters (conv_first_layer.hpp from avx2 up)
                                       {{2, 1, 40, 37}, {5, 1, 3, 3}, {}},
                                       {{2, 3, 12, 11}, {5, 3, 3, 2}, {.stride = {1, 2}, .padding = {1, 1}}},
                                       {{4, 2, 4, 5}, {3, 2, 3, 3}, {.padding = {1, 0}}},
                                       {{3, 16, 9, 9}, {32, 16, 3, 3}, {}},
                                       {{2, 20, 8, 8}, {20, 20, 3, 3}, {.padding = {1, 1}}},
                                       // dx with 24 channels (one block of 16 and one part empty) in
                                       // planes of 36 and of 9 elements (fewer than a tile)
                                       {{2, 24, 6, 6}, {8, 24, 3, 3}, {}},
                                       {{2, 24, 3, 3}, {8, 24, 3, 3}, {.padding = {1, 1}}},
                                       // 128 KiB of float32 results an image: oneDNN's forward pass runs
                                       // on chunks of two images, then on one (conv_onednn.cpp)
                                       {{7, 16, 34, 34}, {32, 16, 3, 3}, {}}};
    unsigned seed = 700;
    for (const pool_case& k : cases)
        for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16})
            for (bool relu : {true, false})
                for (bool with_bias : {true, false})
                    for (bool input_gradient : {true, false})
                        for (const auto& [backend, route] : backends) {
                            if (backend == ConvBackend::measured) continue;
                            const Tensor x = random(k.x, -1.0f, 1.0f, ++seed).to(dtype);
                            const Tensor w = random(k.w, -1.0f, 1.0f, ++seed).to(dtype);
                            const std::optional<Tensor> b =
                                with_bias ? std::optional<Tensor>(random(Shape{k.w[0]}, -0.5f, 0.5f, ++seed).to(dtype))
                                          : std::nullopt;
                            Conv2dOptions o = k.options;
                            o.backend = backend;
                            o.relu = relu;
                            const Tensor pooled = max_pool2d(conv2d(x, w, b, o), {2, 2});
                            std::vector<float> d = random(pooled.shape(), -1.0f, 1.0f, ++seed).to_floats();
                            for (std::size_t i = 0; i < d.size(); i += 37) d[i] = i % 2 ? INFINITY : -INFINITY;
                            const Tensor dy = Tensor::from_floats(pooled.shape(), d, dtype);
                            const auto run_with = [&](bool fused) {
                                GradientTape tape;
                                std::vector<Tensor> sources{w};
                                if (b) sources.push_back(*b);
                                if (input_gradient) sources.push_back(x);
                                for (const Tensor& t : sources) tape.watch(t);
                                const Tensor y =
                                    fused ? conv2d_max_pool(x, w, b, o) : max_pool2d(conv2d(x, w, b, o), {2, 2});
                                std::vector<Tensor> out = tape.gradient(mul(y, dy), sources);
                                out.push_back(y);
                                return out;
                            };
                            BOOST_TEST_CONTEXT(k.x.to_string()
                                               << " " << name_of(dtype) << ", " << route << (relu ? ", relu" : "")
                                               << (with_bias ? ", bias" : "") << (input_gradient ? ", dx" : "")) {
                                const std::vector<Tensor> fused = run_with(true), plain = run_with(false);
                                BOOST_TEST_REQUIRE(fused.size() == plain.size());
                                // a first layer's dw and dbias come from the windows, summed in another order
                                const bool from_windows = !input_gradient && windows_pass(k.w, o);
                                for (std::size_t i = 0; i < plain.size(); ++i) {
                                    BOOST_TEST_REQUIRE(fused[i].shape() == plain[i].shape());
                                    BOOST_TEST_REQUIRE(fused[i].dtype() == plain[i].dtype());
                                    if (from_windows && i + 1 < plain.size()) {
                                        BOOST_TEST(same_sums(fused[i], plain[i], i == 0 ? k.x : Shape{}, x, dy),
                                                   "gradient " << i);
                                        continue;
                                    }
                                    BOOST_TEST(same_bits_any_nan(fused[i], plain[i]),
                                               (i + 1 < plain.size() ? "gradient " : "output ") << i);
                                }
                            }
                        }
}

// conv2d_max_pool rounds each output to its dtype before the max, as conv2d's output holds it: on outputs
// whose windows differ in float32 but round to the same float16 or bfloat16 (the first of them is the
// argmax), that overflow (to infinity), that fall among the subnormals, and on NaN and infinite inputs, the
// pooled outputs and every gradient are max_pool2d(conv2d(…))'s bit for bit (a NaN matching any NaN, as
// same_bits_any_nan says why), with and without the ReLU: on a first layer (conv_first_layer.hpp's pass from avx2
// up, which rounds in registers) and on a layer of 16 channels (oneDNN's blocked results, or channels last
// where its bfloat16 kernels run on AMX; float16 rounded in a pass before the pooling).
BOOST_AUTO_TEST_CASE(conv2d_max_pool_rounds_before_the_max) {
    const std::vector<std::pair<Shape, Shape>> shapes{{{2, 1, 20, 37}, {5, 1, 3, 3}}, {{2, 16, 9, 9}, {32, 16, 3, 3}}};
    // by bands of rows: values a bfloat16 step apart (sums apart in float32, often tied once rounded),
    // large (float16 overflows, bfloat16 and float32 do not), tiny (float16 subnormals), and beyond
    // float32's range once summed
    const std::array<float, 4> scale{1.0f, 3.0e4f, 3.0e-7f, 3.0e38f};
    unsigned seed = 900;
    for (const auto& [xs, ws] : shapes) {
        std::vector<float> xv = random(xs, -1.0f, 1.0f, ++seed).to_floats();
        const std::size_t rows = xs[0] * xs[1] * xs[2];
        for (std::size_t i = 0; i < xv.size(); ++i)
            xv[i] = scale[(i / xs[3]) * scale.size() / rows] * (1.0f + 0x1p-7f * std::round(2.0f * xv[i]));
        for (std::size_t i = 5; i < xv.size(); i += 97) xv[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16})
            for (bool relu : {true, false})
                for (const auto& [backend, route] : backends) {
                    if (backend == ConvBackend::measured) continue;
                    const Tensor x = Tensor::from_floats(xs, xv, dtype);
                    const Tensor w = random(ws, -1.0f, 1.0f, ++seed).to(dtype);
                    const Tensor b = random(Shape{ws[0]}, -0.5f, 0.5f, ++seed).to(dtype);
                    const Conv2dOptions o{.backend = backend, .relu = relu};
                    const Tensor dy =
                        random(max_pool2d(conv2d(x, w, b, o), {2, 2}).shape(), -1.0f, 1.0f, ++seed).to(dtype);
                    const auto run_with = [&](bool fused) {
                        GradientTape tape;
                        const std::vector<Tensor> sources{x, w, b};
                        for (const Tensor& t : sources) tape.watch(t);
                        const Tensor y = fused ? conv2d_max_pool(x, w, b, o) : max_pool2d(conv2d(x, w, b, o), {2, 2});
                        std::vector<Tensor> out = tape.gradient(mul(y, dy), sources);
                        out.push_back(y);
                        return out;
                    };
                    BOOST_TEST_CONTEXT(xs.to_string()
                                       << " " << name_of(dtype) << ", " << route << (relu ? ", relu" : "")) {
                        const std::vector<Tensor> fused = run_with(true), plain = run_with(false);
                        for (std::size_t i = 0; i < plain.size(); ++i)
                            BOOST_TEST(same_bits_any_nan(fused[i], plain[i]),
                                       (i + 1 < plain.size() ? "gradient " : "output ") << i);
                    }
                }
    }
}

/// The weights' and bias's gradients in float64 of a convolution with stride 1, no dilation and no padding,
/// from x (xs) and its output's gradient d (N, O, Ho, Wo), and the sum of |terms| of each element.
struct weight_sums {
    std::vector<double> dw, dw_size, db, db_size;
    weight_sums(const Shape& xs, const Shape& ws, const std::vector<float>& xv, const std::vector<float>& d)
        : dw(ws.elements()), dw_size(dw.size()), db(ws[0]), db_size(ws[0]) {
        const std::size_t n_images = xs[0], channels = xs[1], filters = ws[0], kh = ws[2], kw = ws[3],
                          ho = xs[2] - kh + 1, wo = xs[3] - kw + 1, taps = channels * kh * kw;
        for (std::size_t n = 0; n < n_images; ++n)
            for (std::size_t f = 0; f < filters; ++f)
                for (std::size_t i = 0; i < ho; ++i)
                    for (std::size_t j = 0; j < wo; ++j) {
                        const double g = d[((n * filters + f) * ho + i) * wo + j];
                        db[f] += g;
                        db_size[f] += std::fabs(g);
                        for (std::size_t t = 0; t < taps; ++t) {
                            const std::size_t c = t / (kh * kw), r = i + t / kw % kh, col = j + t % kw;
                            const double term = g * xv[((n * channels + c) * xs[2] + r) * xs[3] + col];
                            dw[f * taps + t] += term;
                            dw_size[f * taps + t] += std::fabs(term);
                        }
                    }
    }
};

/// A first layer of conv2d_max_pool (x not watched) and the two ops' output gradient at the convolution's
/// output (dy at each window's argmax, times the ReLU's derivative): {dw, dbias, that gradient}.
std::vector<Tensor> first_layer_gradients(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
                                          const Conv2dOptions& o) {
    GradientTape tape;
    tape.watch(w);
    tape.watch(b);
    std::vector<Tensor> out = tape.gradient(mul(conv2d_max_pool(x, w, b, o), dy), {w, b});
    GradientTape outputs;
    Conv2dOptions plain = o;
    plain.relu = false;
    const Tensor before = conv2d(x, w, b, plain); // the ReLU's input, as conv2d rounds it
    outputs.watch(before);
    const Tensor y = o.relu ? relu(before) : before;
    out.push_back(outputs.gradient(mul(max_pool2d(y, {2, 2}), dy), {before})[0]);
    return out;
}

// A first layer's dw and dbias, summed from each window's gradient and the inputs under its argmax
// (pooled_weights.hpp), against float64 sums of every output gradient times its inputs, within the bound
// of a float32 sum of N·Ho·Wo terms rounded once (error_bounds.hpp): with 3×3 kernels on one channel
// (sizes known at compile time) and other kernels and channel counts; rows of windows shorter and longer
// than 16 (the lanes), odd rows and columns outside every window. The bits do not depend on the thread
// count or the instruction-set level.
BOOST_AUTO_TEST_CASE(first_layer_weights_from_the_windows) {
    const std::vector<std::pair<Shape, Shape>> cases{{{6, 1, 28, 28}, {5, 1, 3, 3}},
                                                     {{3, 3, 20, 37}, {4, 3, 3, 3}},
                                                     {{2, 1, 9, 40}, {3, 1, 5, 5}},
                                                     {{2, 2, 7, 8}, {2, 2, 3, 2}}};
    unsigned seed = 900;
    for (const auto& [xs, ws] : cases)
        for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16})
            for (bool relu : {true, false}) {
                const Tensor x = random(xs, -1.0f, 1.0f, ++seed).to(dtype),
                             w = random(ws, -1.0f, 1.0f, ++seed).to(dtype),
                             b = random(Shape{ws[0]}, -0.5f, 0.5f, ++seed).to(dtype);
                const Conv2dOptions o{.relu = relu};
                const std::size_t n_images = xs[0], filters = ws[0], ho = xs[2] - ws[2] + 1, wo = xs[3] - ws[3] + 1;
                const Tensor dy = random(Shape{n_images, filters, ho / 2, wo / 2}, 0.1f, 1.0f, ++seed).to(dtype);
                const std::vector<Tensor> got = first_layer_gradients(x, w, b, dy, o);
                const weight_sums ref(xs, ws, x.to_floats(), got[2].to_floats());
                BOOST_TEST_CONTEXT(xs.to_string()
                                   << " " << ws.to_string() << " " << name_of(dtype) << (relu ? ", relu" : "")) {
                    const std::size_t terms = n_images * ho * wo;
                    BOOST_TEST(far_from_sums(got[0], ref.dw, ref.dw_size, terms) == 0u);
                    BOOST_TEST(far_from_sums(got[1], ref.db, ref.db_size, terms) == 0u);
                    for (Isa level : available_isas()) {
                        set_isa(level);
                        for (int threads : {1, 2}) {
                            detail::onednn_set_threads(threads);
                            const std::vector<Tensor> again = first_layer_gradients(x, w, b, dy, o);
                            for (std::size_t i = 0; i < 2; ++i)
                                BOOST_TEST(std::memcmp(again[i].raw(), got[i].raw(), got[i].nbytes()) == 0,
                                           name_of(level) << ", " << threads << " threads, gradient " << i);
                        }
                    }
                    set_isa(max_isa());
                    detail::onednn_set_threads(default_threads);
                }
            }
}

// The bfloat16 weights pass on pairs of images (conv_weights_bf16.hpp) where it applies (an even batch,
// channels and filters in multiples of 16, stride 1, no padding, the avx512_bf16 level, oneDNN without
// AMX), and oneDNN's where it does not: each element of dw and db a float32 sum of N·Ho·Wo exact products,
// within the bound of such a sum of the float64 reference, rounded once to bfloat16. dy is random of both
// signs, so that an image of a pair, or a channel or filter of a block, taken for another shows. Where the
// pass is ours, 1 and 2 threads give the same bits (each element is summed whole by one thread).
BOOST_AUTO_TEST_CASE(bfloat16_weights_pass_on_pairs_of_images) {
    const std::vector<std::pair<Shape, Shape>> cases{{{6, 16, 9, 9}, {16, 16, 3, 3}},
                                                     {{4, 32, 13, 13}, {64, 32, 3, 3}},
                                                     {{2, 16, 6, 11}, {32, 16, 2, 4}},
                                                     {{5, 16, 8, 8}, {16, 16, 3, 3}},
                                                     {{4, 8, 8, 8}, {16, 8, 3, 3}}};
    unsigned seed = 1200;
    for (const auto& [xs, ws] : cases) {
        const Tensor x = random(xs, -1.0f, 1.0f, ++seed).to(Dtype::bfloat16),
                     w = random(ws, -1.0f, 1.0f, ++seed).to(Dtype::bfloat16),
                     b = random(Shape{ws[0]}, -0.5f, 0.5f, ++seed).to(Dtype::bfloat16);
        const std::size_t n_images = xs[0], channels = xs[1], filters = ws[0], ho = xs[2] - ws[2] + 1,
                          wo = xs[3] - ws[3] + 1;
        const Tensor dy = random(Shape{n_images, filters, ho, wo}, -1.0f, 1.0f, ++seed).to(Dtype::bfloat16);
        const auto gradients = [&] {
            GradientTape tape;
            tape.watch(w), tape.watch(b);
            return tape.gradient(mul(conv2d(x, w, b, {.backend = ConvBackend::onednn}), dy), {w, b});
        };
        const std::vector<Tensor> got = gradients();
        const weight_sums ref(xs, ws, x.to_floats(), dy.to_floats());
        const detail::conv_shape shape{n_images,
                                       channels,
                                       xs[2],
                                       xs[3],
                                       filters,
                                       ws[2],
                                       ws[3],
                                       ho,
                                       wo,
                                       {1, 1},
                                       {1, 1},
                                       {0, 0},
                                       detail::conv_operands::bf16};
        const bool ours = detail::bf16_weights_pass_applies(shape);
        BOOST_TEST_CONTEXT(xs.to_string() << " " << ws.to_string() << (ours ? ", pairs of images" : ", oneDNN's")) {
            BOOST_TEST(far_from_sums(got[0], ref.dw, ref.dw_size, n_images * ho * wo) == 0u);
            BOOST_TEST(far_from_sums(got[1], ref.db, ref.db_size, n_images * ho * wo) == 0u);
            for (int threads : {1, 2}) {
                if (!ours) break;
                detail::onednn_set_threads(threads);
                const std::vector<Tensor> again = gradients();
                for (std::size_t i = 0; i < 2; ++i)
                    BOOST_TEST(std::memcmp(again[i].raw(), got[i].raw(), got[i].nbytes()) == 0,
                               threads << " threads, gradient " << i);
            }
            detail::onednn_set_threads(default_threads);
        }
    }
}

// An input that is not finite leaves a first layer's dw and dbias to the two ops' path, bit for bit: each
// output gradient times every input, zeros included (0 · ∞ is NaN), as max_pool2d(conv2d(…)) makes them.
BOOST_AUTO_TEST_CASE(first_layer_weights_with_infinite_inputs) {
    for (float bad : {INFINITY, -INFINITY, NAN}) {
        std::vector<float> v = random(Shape{3, 1, 10, 10}, -1.0f, 1.0f, 950).to_floats();
        v[157] = bad; // image 1
        const Tensor x = Tensor::from_floats(Shape{3, 1, 10, 10}, v), w = random(Shape{2, 1, 3, 3}, -1.0f, 1.0f, 951),
                     b = random(Shape{2}, -0.5f, 0.5f, 952), dy = random(Shape{3, 2, 4, 4}, -1.0f, 1.0f, 953);
        const auto gradients = [&](bool fused) {
            GradientTape tape;
            tape.watch(w);
            tape.watch(b);
            const Tensor y =
                fused ? conv2d_max_pool(x, w, b, {.relu = true}) : max_pool2d(conv2d(x, w, b, {.relu = true}), {2, 2});
            return tape.gradient(mul(y, dy), {w, b});
        };
        const std::vector<Tensor> fused = gradients(true), plain = gradients(false);
        bool nan = false;
        for (float g : fused[0].to_floats()) nan |= std::isnan(g);
        BOOST_TEST(nan, bad); // the image's 0 · ∞ (or NaN) reaches dw
        for (std::size_t i = 0; i < 2; ++i)
            BOOST_TEST(same_bits_any_nan(fused[i], plain[i]), bad << ", gradient " << i);
    }
}

// oneDNN's weights pass reads x as the forward pass reordered it when no pass of that shape ran in
// between, else x reordered again (a float16 x widened only then): a forward pass of b between a's
// forward and backward passes leaves each input the gradient it gets alone, bit for bit (and would give
// a's the gradient of b's x if the reordered x were reused regardless).
BOOST_AUTO_TEST_CASE(interleaved_passes_keep_their_own_inputs) {
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16})
        for (bool pooled : {false, true}) {
            const Conv2dOptions o{.backend = ConvBackend::onednn, .relu = true};
            const Tensor w = random(Shape{16, 16, 3, 3}, -1.0f, 1.0f, 900).to(dtype);
            const Tensor xa = random(Shape{4, 16, 10, 10}, -1.0f, 1.0f, 901).to(dtype);
            const Tensor xb = random(Shape{4, 16, 10, 10}, -1.0f, 1.0f, 902).to(dtype);
            const auto op = [&](const Tensor& x) {
                return pooled ? conv2d_max_pool(x, w, std::nullopt, o) : conv2d(x, w, std::nullopt, o);
            };
            const auto alone = [&](const Tensor& x) {
                GradientTape tape;
                tape.watch(w);
                return tape.gradient(op(x), std::vector<Tensor>{w})[0];
            };
            const Tensor want_a = alone(xa), want_b = alone(xb);
            GradientTape tape({.persistent = true});
            tape.watch(w);
            const Tensor ya = op(xa), yb = op(xb);
            const Tensor got_a = tape.gradient(ya, std::vector<Tensor>{w})[0];
            const Tensor got_b = tape.gradient(yb, std::vector<Tensor>{w})[0];
            BOOST_TEST_CONTEXT(name_of(dtype) << (pooled ? ", pooled" : "")) {
                BOOST_TEST(std::memcmp(got_a.raw(), want_a.raw(), want_a.nbytes()) == 0);
                BOOST_TEST(std::memcmp(got_b.raw(), want_b.raw(), want_b.nbytes()) == 0);
                BOOST_TEST(std::memcmp(want_a.raw(), want_b.raw(), want_b.nbytes()) != 0);
            }
        }
}

/// dx, dw, dbias and y of conv2d on `backend`, with the output gradient dy.
std::vector<Tensor> conv_and_gradients(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
                                       ConvBackend backend) {
    const Conv2dOptions o{.padding = {1, 1}, .backend = backend};
    GradientTape tape;
    for (const Tensor* t : {&x, &w, &b}) tape.watch(*t);
    const Tensor y = conv2d(x, w, b, o);
    std::vector<Tensor> out = tape.gradient(mul(y, dy), std::vector<Tensor>{x, w, b});
    out.push_back(y);
    return out;
}

bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].shape() != b[i].shape() || a[i].dtype() != b[i].dtype() ||
            std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0)
            return false;
    return true;
}

// While rounding is recorded, conv2d_max_pool runs the two ops in turn (the fused passes round the
// convolution's output in pieces that never form a tensor, and make fewer exact roundings on the way
// back), so a recorder counts the same roundings, forward and backward, with the same bits.
BOOST_AUTO_TEST_CASE(conv2d_max_pool_counts_what_the_two_ops_count) {
    for (Dtype dtype : {Dtype::float16, Dtype::bfloat16})
        for (const auto& [backend, route] : backends) {
            const Tensor x = random(Shape{3, 2, 10, 10}, -1.0f, 1.0f, 750).to(dtype);
            const Tensor w = random(Shape{5, 2, 3, 3}, -1.0f, 1.0f, 751).to(dtype);
            const Conv2dOptions o{.backend = backend, .relu = true};
            const auto counted = [&](bool fused, std::vector<Tensor>& out) {
                RoundingRecorder recorder;
                GradientTape tape;
                tape.watch(x);
                tape.watch(w);
                const Tensor y =
                    fused ? conv2d_max_pool(x, w, std::nullopt, o) : max_pool2d(conv2d(x, w, std::nullopt, o), {2, 2});
                out = tape.gradient(y, {x, w});
                out.push_back(y);
                return recorder.total().count;
            };
            std::vector<Tensor> fused, plain;
            const std::uint64_t fused_count = counted(true, fused), plain_count = counted(false, plain);
            BOOST_TEST_CONTEXT(name_of(dtype) << ", " << route) {
                BOOST_TEST(fused_count == plain_count);
                BOOST_TEST(plain_count >= 3 * 5 * 8 * 8); // the convolution's outputs at least
                BOOST_TEST(same_bits(fused, plain));
            }
        }
}

/// The backend a line of measured_choices() names for the pass and shape it starts with ("" if none).
std::string measured_for(const std::string& start) {
    for (const std::string& line : measured_choices())
        if (line.rfind(start, 0) == 0) {
            const std::size_t from = line.find(": ") + 2;
            return line.substr(from, line.find(',', from) - from);
        }
    return "";
}

/// What a measured op promises once its first call gave `first` (results, then y last): its forward and
/// backward choices listed under these keys; the same bits at the next call, without measuring again; y's
/// bits those of the backend its forward pass chose, and every result's when the backward pass chose the
/// same one. run(backend) calls the op (on the backend named, or measured) with a tape.
template <class Run>
void kept_and_chosen(const std::string& forward_key, const std::string& backward_key, const std::vector<Tensor>& first,
                     Run run) {
    const std::string forward = measured_for(forward_key), backward = measured_for(backward_key);
    BOOST_TEST_REQUIRE(!forward.empty());
    BOOST_TEST_REQUIRE(!backward.empty());
    const std::size_t listed = measured_choices().size();
    BOOST_TEST(same_bits(run(ConvBackend::measured), first));
    BOOST_TEST(measured_choices().size() == listed); // measured once
    const std::vector<Tensor> chosen = run(conv_backend_named(forward));
    BOOST_TEST(std::memcmp(chosen.back().raw(), first.back().raw(), first.back().nbytes()) == 0);
    if (forward == backward) BOOST_TEST(same_bits(chosen, first));
}

// ConvBackend::measured times the routes once per pass and shape, lists its choice with each route's
// time, and from then on gives the bits of the backend it chose, every call.
BOOST_AUTO_TEST_CASE(measured_routes_are_listed_and_kept) {
    const Shape xs{5, 3, 10, 11}, ws{4, 3, 3, 3};
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) BOOST_TEST_CONTEXT(name_of(dtype)) {
            const Tensor x = random(xs, -1.0f, 1.0f, 700).to(dtype), w = random(ws, -1.0f, 1.0f, 701).to(dtype);
            const Tensor b = random(Shape{4}, -0.5f, 0.5f, 702).to(dtype);
            const Tensor dy = random(Shape{5, 4, 10, 11}, -1.0f, 1.0f, 703).to(dtype);
            // The roundings of the first call count once, as on a named route (the trials are not counted).
            const auto counted = [&](ConvBackend backend, std::vector<Tensor>& out) {
                RoundingRecorder recorder;
                out = conv_and_gradients(x, w, b, dy, backend);
                return recorder.total().count;
            };
            std::vector<Tensor> first, pinned;
            const std::uint64_t measured_count = counted(ConvBackend::measured, first);
            BOOST_TEST(measured_count == counted(ConvBackend::im2col, pinned));
            if (dtype != Dtype::float32) BOOST_TEST(measured_count > 0u);
            const std::string shape = " x (5, 3, 10, 11) w (4, 3, 3, 3) " + std::string(name_of(dtype)) +
                                      " stride (1, 1) padding (1, 1) dilation (1, 1)";
            for (const std::string& line : measured_choices())
                if (line.find(shape) != std::string::npos) {
                    BOOST_TEST_MESSAGE(line);
                    BOOST_TEST(line.find("im2col ") != std::string::npos); // every route, with its time
                    BOOST_TEST(line.find("onednn ") != std::string::npos);
                    BOOST_TEST(line.find(" ms") != std::string::npos);
                }
            kept_and_chosen("conv2d forward" + shape, "conv2d backward" + shape, first,
                            [&](ConvBackend backend) { return conv_and_gradients(x, w, b, dy, backend); });
        }
}

// With ConvBackend::measured, conv2d_max_pool times its own fused passes on each route, once per pass and
// shape, lists its choices, and keeps them: its pooled outputs are the two ops' on the route its forward
// pass chose, and so are its gradients when the backward pass chose the same route.
BOOST_AUTO_TEST_CASE(conv2d_max_pool_measures_its_routes) {
    const Shape xs{4, 3, 12, 10}, ws{5, 3, 3, 3};
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) BOOST_TEST_CONTEXT(name_of(dtype)) {
            const Tensor x = random(xs, -1.0f, 1.0f, 760).to(dtype), w = random(ws, -1.0f, 1.0f, 761).to(dtype);
            const Tensor b = random(Shape{5}, -0.5f, 0.5f, 762).to(dtype);
            const Tensor dy = random(Shape{4, 5, 5, 4}, -1.0f, 1.0f, 763).to(dtype);
            const auto run = [&](ConvBackend backend, bool fused) {
                const Conv2dOptions o{.backend = backend, .relu = true};
                GradientTape tape;
                for (const Tensor* t : {&x, &w, &b}) tape.watch(*t);
                const Tensor y = fused ? conv2d_max_pool(x, w, b, o) : max_pool2d(conv2d(x, w, b, o), {2, 2});
                std::vector<Tensor> out = tape.gradient(mul(y, dy), std::vector<Tensor>{x, w, b});
                out.push_back(y);
                return out;
            };
            const std::vector<Tensor> first = run(ConvBackend::measured, true);
            const std::string shape = " x (4, 3, 12, 10) w (5, 3, 3, 3) " + std::string(name_of(dtype)) +
                                      " stride (1, 1) padding (0, 0) dilation (1, 1)";
            kept_and_chosen("conv2d pooled forward" + shape, "conv2d pooled backward" + shape, first,
                            [&](ConvBackend backend) { return run(backend, backend == ConvBackend::measured); });
        }
}

// An adopted choice (from a checkpoint or a choices file) is taken without timing: a measured convolution
// then gives the bits of the backend adopted, whichever it is. A name that is not a candidate of its key is
// measured again, and forgetting the choices leaves none.
BOOST_AUTO_TEST_CASE(adopted_routes_are_taken_without_timing) {
    const Shape xs{4, 2, 9, 8}, ws{3, 2, 3, 3};
    const Tensor x = random(xs, -1.0f, 1.0f, 710), w = random(ws, -1.0f, 1.0f, 711);
    const Tensor b = random(Shape{3}, -0.5f, 0.5f, 712), dy = random(Shape{4, 3, 9, 8}, -1.0f, 1.0f, 713);
    const std::string shape = " x (4, 2, 9, 8) w (3, 2, 3, 3) float32 stride (1, 1) padding (1, 1) dilation (1, 1)";
    const std::string forward = "conv2d forward" + shape, backward = "conv2d backward" + shape;
    for (ConvBackend backend : {ConvBackend::im2col, ConvBackend::im2col_onednn, ConvBackend::onednn})
        BOOST_TEST_CONTEXT(name_of(backend)) {
            forget_measured_choices();
            const std::string name(name_of(backend));
            adopt_measured_choices(std::vector<MeasuredChoice>{{forward, name}, {backward, name}});
            BOOST_TEST(same_bits(conv_and_gradients(x, w, b, dy, ConvBackend::measured),
                                 conv_and_gradients(x, w, b, dy, backend)));
            BOOST_TEST((measured_choices() == std::vector<std::string>{forward + ": " + name + ", adopted",
                                                                       backward + ": " + name + ", adopted"}));
            BOOST_TEST((measured_choice_list() == std::vector<MeasuredChoice>{{forward, name}, {backward, name}}));
        }
    forget_measured_choices();
    adopt_measured_choices(std::vector<MeasuredChoice>{{forward, "fastest_ever"}});
    conv_and_gradients(x, w, b, dy, ConvBackend::measured);
    const std::vector<MeasuredChoice> list = measured_choice_list();
    BOOST_TEST_REQUIRE(list.size() == 2u);
    BOOST_TEST(list[0].key == forward);
    BOOST_TEST((list[0].chosen == "im2col" || list[0].chosen == "im2col_onednn" || list[0].chosen == "onednn"));
    BOOST_TEST(measured_choices()[0].find(" ms") != std::string::npos); // measured, not adopted
    // A choice no process holds is refused, and nothing changes.
    BOOST_TEST(op_checks::throws_with<std::invalid_argument>(
        [&] {
            adopt_measured_choices(std::vector<MeasuredChoice>{{backward, "im2col"}, {"a\nb", "im2col"}});
        },
        {"adopt_measured_choices: the choice for 'a\nb': the key holds a control character"}));
    BOOST_TEST((measured_choice_list() == list));
    forget_measured_choices();
    BOOST_TEST(measured_choices().empty());
    BOOST_TEST(measured_choice_list().empty());
}

// Each backend's name gives the backend back; any other name is refused with the list of names.
// ConvBackend::automatic follows set_conv_backend.
BOOST_AUTO_TEST_CASE(conv_backends_by_name_and_for_the_process) {
    for (ConvBackend b : {ConvBackend::automatic, ConvBackend::im2col, ConvBackend::im2col_onednn, ConvBackend::onednn,
                          ConvBackend::measured})
        BOOST_TEST((conv_backend_named(name_of(b)) == b));
    BOOST_TEST((throws_with<std::invalid_argument>([] { conv_backend_named("fastest"); },
                                                   {"'fastest'", "im2col_onednn", "measured"})));

    const Tensor x = random(Shape{4, 3, 9, 9}, -1.0f, 1.0f, 710), w = random(Shape{5, 3, 3, 3}, -1.0f, 1.0f, 711);
    const Tensor b = random(Shape{5}, -0.5f, 0.5f, 712), dy = random(Shape{4, 5, 9, 9}, -1.0f, 1.0f, 713);
    const ConvBackend before = conv_backend();
    for (ConvBackend b2 : {ConvBackend::im2col_onednn, ConvBackend::onednn, ConvBackend::im2col})
        BOOST_TEST_CONTEXT(name_of(b2)) {
            set_conv_backend(b2);
            BOOST_TEST((conv_backend() == b2));
            BOOST_TEST(same_bits(conv_and_gradients(x, w, b, dy, ConvBackend::automatic),
                                 conv_and_gradients(x, w, b, dy, b2)));
        }
    set_conv_backend(before);
}

BOOST_AUTO_TEST_CASE(conv2d_empty_batch) {
    const Tensor y = conv2d(Tensor(Shape{0, 2, 5, 5}), Tensor(Shape{3, 2, 3, 3}), Tensor(Shape{3}));
    BOOST_TEST(y.shape() == (Shape{0, 3, 3, 3}));
}

BOOST_AUTO_TEST_CASE(pool_values) {
    // 4x4 plane 0..15; 2x2 windows
    std::vector<float> v(16);
    std::iota(v.begin(), v.end(), 0.0f);
    const Tensor x = Tensor::from_floats(Shape{1, 1, 4, 4}, v);
    const Tensor m = max_pool2d(x, {2, 2});
    BOOST_TEST(m.to_floats() == (std::vector<float>{5, 7, 13, 15}), boost::test_tools::per_element());
    const Tensor a = avg_pool2d(x, {2, 2});
    BOOST_TEST(a.to_floats() == (std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f}), boost::test_tools::per_element());
    // padding 1, 3x3 windows, stride 1: padding excluded from the count, so the corner is (0+1+4+5)/4
    const Tensor p = avg_pool2d(x, {3, 3}, {1, 1}, {1, 1});
    BOOST_TEST(p.shape() == (Shape{1, 1, 4, 4}));
    BOOST_TEST(p.at({0, 0, 0, 0}) == 2.5f);
    BOOST_TEST(p.at({0, 0, 1, 1}) == 5.0f);
    const Tensor ones = avg_pool2d(Tensor::full(Shape{2, 3, 5, 5}, 1.0f), {3, 3}, {2, 2}, {1, 1});
    for (float y : ones.to_floats()) BOOST_TEST(y == 1.0f);
    // padding is −∞ for max: an all-negative input keeps its own values at the border
    const Tensor neg = max_pool2d(Tensor::full(Shape{1, 1, 3, 3}, -2.0f), {2, 2}, {1, 1}, {1, 1});
    for (float y : neg.to_floats()) BOOST_TEST(y == -2.0f);
    // stride 0 means the kernel; float16 in, float16 out
    const Tensor h = max_pool2d(x.to(Dtype::float16), {2, 2}, {0, 0});
    BOOST_TEST(h.dtype() == Dtype::float16);
    BOOST_TEST(h.to_floats() == m.to_floats(), boost::test_tools::per_element());
}

// Both pools against the window scans written out here, with ties, NaNs and -inf in the data (max) and a
// gradient of random values: y exactly, and dx summed in float32 in output order and rounded once to x's
// dtype. 2×2 windows with stride 2 take a branch-free path of their own; the other cases overlap and pad.
// The larger batches span many blocks of planes, which run on every thread of the pool.
BOOST_AUTO_TEST_CASE(pools_match_a_window_scan) {
    struct pool_case {
        std::size_t n, c, h, w;
        std::array<std::size_t, 2> kernel, stride, padding;
    };
    // 2×2 rows go in runs of 8 windows, or of 4 below 8, the last run overlapping; below 4 one by one
    const pool_case cases[] = {{3, 2, 7, 6, {2, 2}, {2, 2}, {0, 0}},     // odd height: the last row is in no window
                               {64, 32, 13, 11, {2, 2}, {2, 2}, {0, 0}}, // 5 windows a row, odd width
                               {16, 8, 26, 26, {2, 2}, {2, 2}, {0, 0}},  // 13: the cnn model's first pool
                               {5, 3, 6, 33, {2, 2}, {2, 2}, {0, 0}},    // 16: two runs, none overlapping
                               {4, 2, 2, 16, {2, 2}, {2, 2}, {0, 0}},    // 8: one run
                               {4, 2, 4, 8, {2, 2}, {2, 2}, {0, 0}},     // 4: one run of 4
                               {2, 3, 6, 7, {3, 3}, {1, 1}, {1, 1}},     {48, 16, 9, 10, {3, 2}, {2, 1}, {1, 0}}};
    std::mt19937 gen(5);
    std::uniform_int_distribution<int> small(-3, 3), kind(0, 19);
    std::uniform_real_distribution<float> grad(-1.0f, 1.0f);
    for (const pool_case& k : cases)
        for (Dtype dtype : {Dtype::float32, Dtype::float16}) {
            const std::size_t ho = (k.h + 2 * k.padding[0] - k.kernel[0]) / k.stride[0] + 1,
                              wo = (k.w + 2 * k.padding[1] - k.kernel[1]) / k.stride[1] + 1, planes = k.n * k.c;
            std::vector<float> v(planes * k.h * k.w), avg_v(v.size()), d(planes * ho * wo);
            for (float& e : v) {
                const int kd = kind(gen);
                e = kd == 0 ? NAN : kd == 1 ? -INFINITY : static_cast<float>(small(gen)); // few values: many ties
            }
            for (float& e : avg_v) e = static_cast<float>(small(gen));
            const auto rounded_to_dtype = [dtype](float f) {
                return Tensor::from_floats(Shape{1}, std::vector<float>{f}, dtype).flat(0);
            };
            for (float& e : d) e = rounded_to_dtype(grad(gen));
            const Tensor x = Tensor::from_floats(Shape{k.n, k.c, k.h, k.w}, v, dtype),
                         xa = Tensor::from_floats(x.shape(), avg_v, dtype);
            GradientTape tape;
            tape.watch(x);
            tape.watch(xa);
            const Tensor y = max_pool2d(x, k.kernel, k.stride, k.padding),
                         ya = avg_pool2d(xa, k.kernel, k.stride, k.padding);
            const Tensor dy = Tensor::from_floats(y.shape(), d, dtype);
            const auto grads = tape.gradient(add(mul(y, dy), mul(ya, dy)), std::vector<Tensor>{x, xa});
            std::vector<float> want_dx(v.size(), 0.0f), want_dxa(v.size(), 0.0f);
            std::size_t out = 0;
            for (std::size_t plane = 0; plane < planes; ++plane)
                for (std::size_t i = 0; i < ho; ++i)
                    for (std::size_t j = 0; j < wo; ++j, ++out) {
                        std::size_t best_at = 0, count = 0;
                        float best = -INFINITY, sum = 0;
                        bool first = true;
                        std::vector<std::size_t> window;
                        for (std::size_t r = i * k.stride[0]; r < i * k.stride[0] + k.kernel[0]; ++r)
                            for (std::size_t q = j * k.stride[1]; q < j * k.stride[1] + k.kernel[1]; ++q) {
                                if (r < k.padding[0] || q < k.padding[1] || r - k.padding[0] >= k.h ||
                                    q - k.padding[1] >= k.w)
                                    continue;
                                const std::size_t at = (plane * k.h + r - k.padding[0]) * k.w + q - k.padding[1];
                                const bool nan_first = std::isnan(v[at]) && !std::isnan(best);
                                if (first || v[at] > best || nan_first) best = v[at], best_at = at;
                                first = false;
                                sum += avg_v[at];
                                window.push_back(at);
                                ++count;
                            }
                        const float got = y.flat(out);
                        BOOST_TEST_REQUIRE((got == best || (std::isnan(got) && std::isnan(best))));
                        const float mean = sum / static_cast<float>(count);
                        BOOST_TEST_REQUIRE(ya.flat(out) == rounded_to_dtype(mean));
                        want_dx[best_at] += d[out];
                        for (std::size_t at : window) want_dxa[at] += d[out] / static_cast<float>(count);
                    }
            const std::vector<float> dx = grads[0].to_floats(), dxa = grads[1].to_floats(),
                                     rounded = Tensor::from_floats(x.shape(), want_dx, dtype).to_floats(),
                                     rounded_a = Tensor::from_floats(x.shape(), want_dxa, dtype).to_floats();
            for (std::size_t e = 0; e < v.size(); ++e) {
                BOOST_TEST_REQUIRE(dx[e] == rounded[e]);
                BOOST_TEST_REQUIRE(dxa[e] == rounded_a[e]);
            }
        }
}

// Ties: the whole window is equal, so the gradient goes to its first element in row-major order.
BOOST_AUTO_TEST_CASE(max_pool2d_ties_go_to_the_first) {
    const Tensor x = Tensor::full(Shape{1, 1, 4, 4}, 3.0f);
    GradientTape tape;
    tape.watch(x);
    const Tensor g = tape.gradient(max_pool2d(x, {2, 2}), {x})[0];
    const std::vector<float> expected{1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0};
    BOOST_TEST(g.to_floats() == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pool_gradients) {
    struct pool_case {
        std::string name;
        std::array<std::size_t, 2> kernel, stride, padding;
    };
    const std::vector<pool_case> cases{{"2x2", {2, 2}, {0, 0}, {0, 0}},
                                       {"3x3 stride 2 padding 1", {3, 3}, {2, 2}, {1, 1}},
                                       {"2x3 stride (1, 2) padding (1, 1)", {2, 3}, {1, 2}, {1, 1}},
                                       {"3x2 stride 1", {3, 2}, {1, 1}, {0, 0}}};
    unsigned seed = 500;
    for (const pool_case& k : cases) {
        check("max_pool2d " + k.name, [k](const auto& in) { return max_pool2d(in[0], k.kernel, k.stride, k.padding); },
              {distinct(Shape{2, 2, 6, 6}, ++seed)});
        check("avg_pool2d " + k.name, [k](const auto& in) { return avg_pool2d(in[0], k.kernel, k.stride, k.padding); },
              {random(Shape{2, 2, 6, 5}, 0.1f, 2.0f, ++seed)});
    }
}

// conv2d_max_pool against finite differences: one input channel and 1×1 kernels with positive weights, so
// each output channel is an increasing function of the distinct x and the max of a window never changes
// hands; with the ReLU, a bias that keeps every output positive (the mask passes all).
BOOST_AUTO_TEST_CASE(conv2d_max_pool_gradients) {
    const Tensor x = distinct(Shape{2, 1, 6, 6}, 800);
    const Tensor w = random(Shape{3, 1, 1, 1}, 0.5f, 1.5f, 801);
    for (bool relu : {false, true}) {
        const Tensor b = relu ? random(Shape{3}, 8.0f, 9.0f, 802) : random(Shape{3}, -0.5f, 0.5f, 802);
        check(std::string("conv2d_max_pool") + (relu ? " relu" : ""),
              [relu](const auto& in) { return conv2d_max_pool(in[0], in[1], in[2], {.relu = relu}); }, {x, w, b});
    }
}

// A first layer (x a constant: dw and dbias from the windows) against finite differences, with a 3×3
// kernel on one channel (sizes known at compile time) and a 2×3 one on two. One tap of weight 5 on x's
// values 0.1 apart and the others at most 0.002, with a bias of 0.25: the results of a window lie 0.3 or
// more apart and 0.13 or more from 0, so no step of the finite differences moves an argmax or a ReLU.
BOOST_AUTO_TEST_CASE(conv2d_max_pool_first_layer_gradients) {
    for (const auto& [xs, ws, big] : {std::tuple{Shape{2, 1, 8, 8}, Shape{3, 1, 3, 3}, std::size_t{4}},
                                      {Shape{2, 2, 7, 8}, Shape{2, 2, 2, 3}, 0}}) {
        const Tensor x = distinct(xs, 810);
        std::vector<float> wv = random(ws, 0.001f, 0.002f, 811).to_floats();
        for (std::size_t o = 0; o < ws[0]; ++o) wv[o * ws[1] * ws[2] * ws[3] + big] = 5.0f;
        const Tensor w = Tensor::from_floats(ws, wv), b = Tensor::full(Shape{ws[0]}, 0.25f);
        for (bool relu : {false, true})
            check("conv2d_max_pool first layer " + ws.to_string() + (relu ? " relu" : ""),
                  [x, relu](const auto& in) {
                      return conv2d_max_pool(x.to(in[0].dtype()), in[0], in[1], {.relu = relu});
                  },
                  {w, b});
    }
}

BOOST_AUTO_TEST_CASE(shape_errors_name_the_shapes) {
    const Tensor x(Shape{8, 3, 28, 28}), w(Shape{16, 3, 3, 3});
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            conv2d(x, Tensor(Shape{16, 4, 3, 3}));
        },
        {"(8, 3, 28, 28)", "3 channels", "(16, 4, 3, 3)", "expect 4"})));
    BOOST_TEST((throws_with<shape_error>([&] { conv2d(Tensor(Shape{3, 28, 28}), w); }, {"(3, 28, 28)", "rank 4"})));
    BOOST_TEST((throws_with<shape_error>([&] { conv2d(x, Tensor(Shape{16, 3, 9})); }, {"(16, 3, 9)", "rank 4"})));
    BOOST_TEST((throws_with<shape_error>([&] { conv2d(x, w, Tensor(Shape{15})); }, {"(15)", "(16)", "(16, 3, 3, 3)"})));
    BOOST_TEST((throws_with<shape_error>([&] { conv2d(x, w, Tensor(Shape{1, 16})); }, {"(1, 16)"})));
    BOOST_TEST((throws_with<shape_error>([&] { conv2d(x, w, std::nullopt, {.stride = {0, 1}}); }, {"stride (0, 1)"})));
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            conv2d(x, w, std::nullopt, {.dilation = {1, 0}});
        },
        {"dilation (1, 0)"})));
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            conv2d(Tensor(Shape{1, 3, 4, 4}), w, std::nullopt, {.dilation = {2, 2}});
        },
        {"(1, 3, 4, 4)", "(5, 5)", "(16, 3, 3, 3)"})));
    BOOST_TEST((throws_with<shape_error>([&] { conv2d(x, Tensor(Shape{16, 3, 0, 3})); }, {"(16, 3, 0, 3)"})));
    BOOST_CHECK_THROW(conv2d(x, w.to(Dtype::float16)), dtype_error);
    BOOST_CHECK_THROW(conv2d(x, w, Tensor(Shape{16}, Dtype::bfloat16)), dtype_error);

    BOOST_TEST((throws_with<shape_error>(
        [&] {
            max_pool2d(Tensor(Shape{3, 4, 4}), {2, 2});
        },
        {"(3, 4, 4)", "rank 4"})));
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            avg_pool2d(x, {2, 2}, {1, 1}, {2, 0});
        },
        {"(8, 3, 28, 28)", "padding (2, 0)"})));
    BOOST_TEST((throws_with<shape_error>(
        [&] {
            max_pool2d(Tensor(Shape{1, 1, 2, 5}), {3, 3});
        },
        {"(1, 1, 2, 5)", "(3, 3)"})));
    BOOST_TEST((throws_with<shape_error>([&] { avg_pool2d(x, {0, 2}); }, {"kernel (0, 2)"})));
}
