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

/// c = op(a) op(b) in float32 by OpenBLAS's sgemm, or with `onednn` by oneDNN's matmul primitive.
void sgemm(const gemm_shape& s, const float* a, const float* b, float* c, bool onednn);
/// The same product by OpenBLAS's sgemm.
void openblas_sgemm(const gemm_shape& s, const float* a, const float* b, float* c);
/// The same product by oneDNN's matmul primitive (its brgemm kernels, so other bits than OpenBLAS's; a batch
/// in one call), made on first use of the shape on each thread; serial inside a parallel region as
/// OpenBLAS's sgemm is. On its own threads it may split long sums over them, as the BLAS libraries do.
void onednn_matmul_f32(const gemm_shape& s, const float* a, const float* b, float* c);
/// The same product by oneDNN's sgemm API (one product after another), as the im2col convolution route
/// runs its GEMMs (on each thread's part of a batch, where it is faster than the primitive, which would
/// repack the weights on each thread) and the benchmarks' libraries' ceiling times it.
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
