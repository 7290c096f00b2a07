#pragma once
// Internal: the BLAS and oneDNN calls behind matmul.

#include <cstddef>

namespace mixprec::autodiff::detail {

/// c (batch, m, n) = op(a) @ op(b) for row-major a (batch, m, k) [or (batch, k, m) transposed] and
/// b (batch or 1, k, n) [or (.., n, k) transposed].
struct gemm_shape {
    std::size_t batch, m, n, k;
    bool transpose_a, transpose_b, batched_b;
};

/// c = op(a) op(b) by OpenBLAS's sgemm, or oneDNN's with `onednn`.
void sgemm(const gemm_shape& s, const float* a, const float* b, float* c, bool onednn);
/// The same product by OpenBLAS's sgemm.
void openblas_sgemm(const gemm_shape& s, const float* a, const float* b, float* c);
/// The same product by oneDNN's sgemm (its own blocking and kernels, so other bits than OpenBLAS's); one
/// product after another, each serial inside a parallel region as OpenBLAS's are.
void onednn_sgemm(const gemm_shape& s, const float* a, const float* b, float* c);

/// True at the avx512_bf16 level and above, where bfloat16 products and convolutions go to oneDNN.
bool onednn_bf16_available();
/// a and b hold bfloat16. c receives float32, or with `bf16_out` the product rounded to bfloat16 by
/// oneDNN (vcvtneps2bf16). `bias`, if not null, holds n bfloat16 values added to every row in float32
/// before that rounding.
void onednn_matmul_bf16(const gemm_shape& s, const void* a, const void* b, void* c, bool bf16_out = false,
                        const void* bias = nullptr);

void onednn_set_threads(int threads);

/// The highest instruction set oneDNN dispatches to (a dnnl_cpu_isa_t), after capping it (isa.hpp).
unsigned onednn_effective_isa();
/// Whether oneDNN dispatches to AMX (Sapphire Rapids and later, unless capped).
bool onednn_amx();

} // namespace mixprec::autodiff::detail
