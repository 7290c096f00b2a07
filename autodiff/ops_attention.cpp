#include <mixprec/autodiff/ops_attention.hpp>

#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_matmul.hpp>
#include <mixprec/autodiff/ops_shape.hpp>
#include <mixprec/autodiff/ops_softmax.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/kernels_attention.hpp>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

namespace mixprec::autodiff {
namespace {

/// The attention as a composition of ops, in qkv's dtype.
Tensor composed(const Tensor& qkv, const kernels::AttentionShape& s) {
    const std::size_t inner = s.heads * s.key_dim;
    // (B, T, 3HK) -> (3, B, H, T, K): queries, keys and values, each (B·H, T, K) after the split.
    const Tensor split = transpose(reshape(qkv, Shape{s.batch, s.tokens, 3, s.heads, s.key_dim}), {2, 0, 3, 1, 4});
    const Shape per_head{s.batch * s.heads, s.tokens, s.key_dim};
    const Tensor q = scale(reshape(slice(split, 0, 0, 1), per_head), s.scale);
    const Tensor k = reshape(slice(split, 0, 1, 2), per_head);
    const Tensor v = reshape(slice(split, 0, 2, 3), per_head);

    const Tensor weights = softmax(matmul(q, k, {.transpose_b = true}), -1); // (B·H, T, T)
    const Tensor context = matmul(weights, v);                               // (B·H, T, K)

    // (B, H, T, K) -> (B, T, H, K): heads side by side.
    return reshape(transpose(reshape(context, Shape{s.batch, s.heads, s.tokens, s.key_dim}), {0, 2, 1, 3}),
                   Shape{s.batch, s.tokens, inner});
}

/// The fused float32 attention and its backward (kernels_attention.hpp).
Tensor fused(const Tensor& qkv, const kernels::AttentionShape& s) {
    const std::size_t inner = s.heads * s.key_dim;
    Tensor context = Tensor::uninitialized(Shape{s.batch, s.tokens, inner});
    const auto weights = std::make_shared_for_overwrite<float[]>(s.batch * s.heads * s.tokens * s.tokens);
    kernels::attention_forward(static_cast<const float*>(qkv.raw()), s, static_cast<float*>(context.raw()),
                               weights.get());
    if (should_record({&qkv}))
        record(context, {&qkv}, [qkv, weights, s](const Tensor& dcontext) {
            const Tensor dc = dcontext.to(Dtype::float32);
            Tensor dqkv = Tensor::uninitialized(qkv.shape());
            kernels::attention_backward(static_cast<const float*>(qkv.raw()), weights.get(),
                                        static_cast<const float*>(dc.raw()), s, static_cast<float*>(dqkv.raw()));
            return Gradients{dqkv};
        });
    return context;
}

/// The attention's shape, after checking qkv against heads and key_dim (`op` names the caller).
kernels::AttentionShape attention_shape(const Tensor& qkv, std::size_t heads, std::size_t key_dim, const char* op) {
    if (heads == 0 || key_dim == 0)
        throw std::invalid_argument(std::string(op) + ": heads and key_dim must be at least 1, got " +
                                    std::to_string(heads) + " and " + std::to_string(key_dim));
    if (qkv.rank() != 3 || qkv.shape()[2] != 3 * heads * key_dim)
        throw shape_error(std::string(op) + ": qkv " + qkv.shape().to_string() + " must have shape (batch, tokens, " +
                          std::to_string(3 * heads * key_dim) + ") for " + std::to_string(heads) +
                          " heads of key_dim " + std::to_string(key_dim));
    return {qkv.shape()[0], qkv.shape()[1], heads, key_dim,
            static_cast<float>(1.0 / std::sqrt(static_cast<double>(key_dim)))};
}

} // namespace

Tensor self_attention(const Tensor& qkv, std::size_t heads, std::size_t key_dim) {
    const kernels::AttentionShape s = attention_shape(qkv, heads, key_dim, "self_attention");
    const Float32Gemm library = float32_gemm(); // the fused op multiplies its batches of products on OpenBLAS
    const bool on_openblas =
        library == Float32Gemm::openblas || (library == Float32Gemm::automatic && !automatic_gemm_takes_onednn(true));
    const bool fuse = qkv.dtype() == Dtype::float32 && on_openblas && qkv.size() != 0;
    return fuse ? fused(qkv, s) : composed(qkv, s);
}

Tensor self_attention_from_ops(const Tensor& qkv, std::size_t heads, std::size_t key_dim) {
    return composed(qkv, attention_shape(qkv, heads, key_dim, "self_attention_from_ops"));
}

} // namespace mixprec::autodiff
