#include <mixprec/autodiff/tensor/kernels_attention.hpp>

#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/detail/softmax_lane.hpp>

#include <cblas.h>

#include <vector>

namespace mixprec::autodiff::kernels {
namespace {

/// One product on this thread: c (m, n, row stride ldc) = alpha · op(a) op(b), row-major, with a (lda) and
/// b (ldb) transposed as asked.
void product(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
             const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc) {
    cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
                static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0f, c, static_cast<blasint>(ldc));
}

/// Where head h of example b starts: its queries in qkv (keys and values follow at + H·K and + 2·H·K), its
/// columns in context, its weights.
struct Head {
    std::size_t qkv, context, weights;
};
Head head(const AttentionShape& s, std::size_t i) {
    const std::size_t b = i / s.heads, h = i % s.heads, inner = s.heads * s.key_dim;
    return {b * s.tokens * 3 * inner + h * s.key_dim, b * s.tokens * inner + h * s.key_dim, i * s.tokens * s.tokens};
}

/// f(i) for every head i of every example, spread over the threads (one at least 16 heads), each thread's
/// heads in the copy compiled for the level in use (the softmax loops vectorize; isa_kernels.hpp).
template <class F>
void each_head(const AttentionShape& s, F f) {
    autodiff::detail::split(s.batch * s.heads, 16, [&](std::size_t i0, std::size_t i1) {
        autodiff::detail::vectorized([&] {
            for (std::size_t i = i0; i < i1; ++i) f(i);
        });
    });
}

} // namespace

void attention_forward(const float* qkv, const AttentionShape& s, float* context, float* weights) {
    const std::size_t t = s.tokens, kd = s.key_dim, inner = s.heads * kd, row = 3 * inner;
    each_head(s, [&](std::size_t i) {
        const Head at = head(s, i);
        const float* q = qkv + at.qkv;
        float* p = weights + at.weights;
        product(false, true, t, t, kd, s.scale, q, row, q + inner, row, p, t); // scores q kᵀ · scale
        for (std::size_t r = 0; r < t; ++r) autodiff::detail::softmax_lane(p + r * t, p + r * t, nullptr, t, 1);
        product(false, false, t, kd, t, 1.0f, p, t, q + 2 * inner, row, context + at.context, inner); // p v
    });
}

void attention_backward(const float* qkv, const float* weights, const float* dcontext, const AttentionShape& s,
                        float* dqkv) {
    const std::size_t t = s.tokens, kd = s.key_dim, inner = s.heads * kd, row = 3 * inner;
    each_head(s, [&](std::size_t i) {
        thread_local std::vector<float> dp;
        dp.resize(t * t);
        const Head at = head(s, i);
        const float *q = qkv + at.qkv, *p = weights + at.weights, *dc = dcontext + at.context;
        float* dq = dqkv + at.qkv;
        product(false, true, t, t, kd, 1.0f, dc, inner, q + 2 * inner, row, dp.data(), t); // dp = dc vᵀ
        product(true, false, t, kd, t, 1.0f, p, t, dc, inner, dq + 2 * inner, row);        // dv = pᵀ dc
        for (std::size_t r = 0; r < t; ++r)
            autodiff::detail::softmax_backward_lane(p + r * t, dp.data() + r * t, dp.data() + r * t, t, 1); // ds
        product(false, false, t, kd, t, s.scale, dp.data(), t, q + inner, row, dq, row); // dq = ds k · scale
        product(true, false, t, kd, t, s.scale, dp.data(), t, q, row, dq + inner, row);  // dk = dsᵀ q · scale
    });
}

} // namespace mixprec::autodiff::kernels
