#define BOOST_TEST_MODULE ops_attention
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"

#include <cstring>
#include <string>
#include <vector>

using namespace mixprec::autodiff;

namespace {

struct Case {
    std::size_t batch, tokens, heads, key_dim;
};

Tensor qkv_for(const Case& c, unsigned seed) {
    return op_checks::uniform(Shape{c.batch, c.tokens, 3 * c.heads * c.key_dim}, 0.1f, 1.0f, seed);
}

std::string name_of(const Case& c) {
    return "B=" + std::to_string(c.batch) + " T=" + std::to_string(c.tokens) + " H=" + std::to_string(c.heads) +
           " K=" + std::to_string(c.key_dim);
}

/// f(qkv) and the gradient of Σ f(qkv) ⊙ dy with respect to qkv.
template <class F>
std::pair<Tensor, Tensor> forward_and_gradient(F f, const Tensor& qkv, const Tensor& dy) {
    GradientTape tape;
    tape.watch(qkv);
    const Tensor y = f(qkv);
    return {y, tape.gradient(mul(y, dy), std::vector<Tensor>{qkv})[0]};
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

} // namespace

// Finite differences in float32 (the fused route), and float16 and bfloat16 (composed from the ops)
// against float32: each op of the composition rounds its output and gradient once; the tolerances are
// the attention layer's (tests/test_attention.cpp).
BOOST_AUTO_TEST_CASE(self_attention_gradients) {
    unsigned seed = 10;
    for (const Case& c : {Case{2, 3, 2, 2}, Case{1, 4, 1, 3}, Case{2, 5, 3, 4}})
        op_checks::check_gradients(
            "self_attention " + name_of(c),
            [c](const std::vector<Tensor>& in) { return self_attention(in[0], c.heads, c.key_dim); },
            {qkv_for(c, ++seed)}, 8 * 0x1p-11, 16 * 0x1p-8);
}

// Where 1/√K is a power of 2, scaling q before its products (the ops) and scaling their float32 sums (the
// fused route) give the same scores, and the fused route runs the same products and softmax: the result
// and the gradient have the ops' bits. Shapes with one head, with several, and the ViT's head width.
BOOST_AUTO_TEST_CASE(self_attention_fused_gives_the_bits_of_the_ops) {
    unsigned seed = 20;
    for (const Case& c : {Case{3, 5, 1, 4}, Case{4, 7, 3, 1}, Case{8, 16, 4, 16}}) {
        const Tensor qkv = qkv_for(c, ++seed);
        const Tensor dy = op_checks::uniform(Shape{c.batch, c.tokens, c.heads * c.key_dim}, 0.1f, 1.0f, ++seed);
        const auto [y, dqkv] =
            forward_and_gradient([c](const Tensor& x) { return self_attention(x, c.heads, c.key_dim); }, qkv, dy);
        const auto [want_y, want_dqkv] = forward_and_gradient(
            [c](const Tensor& x) { return self_attention_from_ops(x, c.heads, c.key_dim); }, qkv, dy);
        BOOST_TEST_CONTEXT(name_of(c)) {
            BOOST_TEST(same_bits(y, want_y));
            BOOST_TEST(same_bits(dqkv, want_dqkv));
        }
    }
}

// Each head is computed on one thread: one thread or two, the same bits (the pool is left at two).
BOOST_AUTO_TEST_CASE(self_attention_bits_do_not_depend_on_the_threads) {
    const Case c{16, 9, 3, 5};
    const Tensor qkv = qkv_for(c, 30);
    const Tensor dy = op_checks::uniform(Shape{c.batch, c.tokens, c.heads * c.key_dim}, 0.1f, 1.0f, 31);
    const auto run = [&](int threads) {
        set_blas_threads(threads);
        return forward_and_gradient([c](const Tensor& x) { return self_attention(x, c.heads, c.key_dim); }, qkv, dy);
    };
    const auto [y1, g1] = run(1);
    const auto [y2, g2] = run(2);
    BOOST_TEST(same_bits(y1, y2));
    BOOST_TEST(same_bits(g1, g2));
}

BOOST_AUTO_TEST_CASE(self_attention_errors) {
    using op_checks::throws_with;
    const Tensor qkv(Shape{2, 3, 12});
    BOOST_TEST((throws_with<shape_error>([&] { self_attention(qkv, 2, 3); },
                                         {"qkv (2, 3, 12)", "(batch, tokens, 18)", "2 heads of key_dim 3"})));
    BOOST_TEST((throws_with<shape_error>([] { self_attention(Tensor(Shape{4, 12}), 2, 2); }, {"qkv (4, 12)"})));
    BOOST_TEST((throws_with<std::invalid_argument>([&] { self_attention(qkv, 0, 4); }, {"heads and key_dim", "0"})));
    BOOST_TEST((throws_with<std::invalid_argument>([&] { self_attention(qkv, 4, 0); }, {"got 4 and 0"})));
}
