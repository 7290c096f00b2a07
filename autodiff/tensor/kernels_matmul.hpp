#pragma once
/// Matrix products of tensors of any dtype, computed in float32 by a BLAS library and rounded once to
/// the operands' dtype.
///
///   a (m, k)    @ b (k, n)    -> (m, n)
///   a (B, m, k) @ b (B, k, n) -> (B, m, n)      batched
///   a (B, m, k) @ b (k, n)    -> (B, m, n)      one b for every batch (a Dense layer over a sequence)
/// with `transpose_a` / `transpose_b` applying to the last two axes of the stored operand.
///
/// float32 goes straight to OpenBLAS's sgemm or oneDNN's matmul primitive (Float32Gemm below). float16,
/// cbfloat16 and FP8 operands are widened to float32 with the conversion kernels, multiplied so, and the
/// product is rounded once. bfloat16 goes to oneDNN's matmul at the avx512_bf16 instruction-set level and
/// above (isa.hpp), else the sgemm route.
/// oneDNN multiplies with vdpbf16ps (or AMX's tdpbf16ps where the CPU has AMX and MIXPREC_ISA does not cap
/// it; products of bfloat16 are exact in float32, sums in float32), adds the bias and rounds once to
/// bfloat16 with vcvtneps2bf16, to nearest even. These instructions flush float32 subnormals to zero, in
/// products and sums and in the rounding's input, so on this route a result smaller than 2^-126 in
/// magnitude comes out as zero, as on the hardware; the sgemm route keeps it. Otherwise the two routes
/// give the same product up to float32 summation order, which also differs between CPUs and thread
/// counts (OpenBLAS and oneDNN pick their kernels and splits by both): each element c of a product of
/// length k lies within γ_k Σ|a_i b_i| of the exact sum before its one rounding (γ_k = k u / (1 − k u),
/// u = 2^-24).

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <optional>
#include <string_view>

namespace mixprec::autodiff {

/// Which library multiplies bfloat16 operands (other dtypes always use sgemm).
enum class MatmulBackend : unsigned char {
    automatic, ///< oneDNN at the avx512_bf16 level and above, else sgemm
    sgemm,     ///< widen to float32, sgemm (the process's Float32Gemm)
    onednn,    ///< oneDNN bf16 matmul (invalid_argument for other dtypes)
};

struct MatmulOptions {
    bool transpose_a = false;
    bool transpose_b = false;
    MatmulBackend backend = MatmulBackend::automatic;
    /// The float32 product is multiplied by alpha (in float32) before the bias is added and the result
    /// rounded: an FP8 product's 1 / (scale_a · scale_b). 1 leaves every route as described above; any
    /// other value takes the sgemm route.
    float alpha = 1.0f;
    /// The result's dtype (and the bias's). Unset: the operands' one dtype. Set, the operands may have
    /// different dtypes (e5m2 gradients times e4m3 weights): each is widened to float32 exactly, and the
    /// product takes the sgemm route unless all three are bfloat16.
    std::optional<Dtype> out_dtype = std::nullopt;
};

namespace kernels {
/// a @ b (× alpha), rounded once to the common dtype or options.out_dtype. shape_error names both shapes
/// when they do not fit; dtype_error when the dtypes differ and out_dtype is unset. (No autodiff: the recorded op is mixprec::autodiff::matmul.)
/// A `bias` of shape (n,) and the same dtype is added to every row in float32, before the one rounding.
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options = {}, const Tensor* bias = nullptr);
} // namespace kernels

/// Sets the threads OpenBLAS and oneDNN use (both, so they never oversubscribe the cores).
void set_blas_threads(int threads);

/// The library behind the float32 products of matmul (every dtype but bfloat16 on oneDNN's bfloat16
/// route): OpenBLAS's sgemm or oneDNN's matmul primitive (its brgemm kernels). Both sum in float32 within
/// the bound above, in different orders, so they differ in their last bits. OpenBLAS's kernels follow the
/// CPU model and ignore MIXPREC_ISA; oneDNN's follow MIXPREC_ISA, so with it a run's digest changes with
/// the level.
enum class Float32Gemm : unsigned char {
    /// A rule fixed in advance, from the CPUs measured: oneDNN from the avx512 level up for products of
    /// one right-hand matrix (Dense layers, projections), OpenBLAS for batches of products (attention's,
    /// per head, which ran faster there than on oneDNN's sgemm, one call for each) and below avx512. The
    /// bits depend on the level only as convolutions' do: one set below avx512, another from there up
    /// (oneDNN's float32 matrix-product kernels are its avx512_core ones at every level above).
    automatic,
    openblas,
    onednn,
    /// Both, at the first product of each shape and dtypes (once untimed, three times timed), keeping the
    /// faster for the rest of the process (measured_choices(), measured.hpp, lists them). Products inside a
    /// parallel region take OpenBLAS. The choice rests on timings, so two runs may choose differently and
    /// then differ in their bits: pin a library where a run must repeat bit for bit.
    measured,
};

/// Whether Float32Gemm::automatic runs a product on oneDNN at the process's level: a product of
/// one right-hand matrix (not `batch_of_products`) from avx512 up.
bool automatic_gemm_takes_onednn(bool batch_of_products);

/// "automatic", "openblas", "onednn" or "measured".
std::string_view name_of(Float32Gemm library);
/// The library of that name; std::invalid_argument naming the choices for any other.
Float32Gemm float32_gemm_named(std::string_view name);
/// This process's library: at first MIXPREC_GEMM's when that is set, else automatic. set_float32_gemm
/// changes it (for every thread; no product may run meanwhile).
Float32Gemm float32_gemm();
void set_float32_gemm(Float32Gemm library);

} // namespace mixprec::autodiff
