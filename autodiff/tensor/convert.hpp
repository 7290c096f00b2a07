#pragma once
/// Bulk conversion between float32 and the narrow formats: the hot kernel of mixed precision.
///
/// Every instruction-set level (isa.hpp) gives the same bits as the scalar `encode`/`decode` of
/// format.hpp; the level in use picks the kernels:
///   avx512_bf16  the avx512 kernels, bfloat16 narrowed by vcvtneps2bf16, and cbfloat16 and FP8 narrowed
///                (and float8_e4m3 widened) with AVX512-VBMI byte permutes where the CPU has them
///   avx512       AVX-512 F/BW/VL/DQ, and vcvtps2ph/vcvtph2ps for float16
///   avx2         vcvtps2ph/vcvtph2ps (F16C) for float16, plain C++ for the others
///   portable     plain C++ (what the compiler makes of it for the x86-64 baseline)

#include <mixprec/autodiff/tensor/dtype.hpp>
#include <mixprec/autodiff/tensor/isa.hpp>

#include <cstddef>

namespace mixprec::autodiff {

/// What to do with a magnitude that rounds beyond the largest finite value of the target format.
enum class Overflow : unsigned char {
    infinity, ///< ±infinity (NaN for float8_e4m3, which has no infinity): what hardware does
    saturate, ///< ±largest finite value; ±infinity also saturates; NaN stays NaN
};

/// dst[i] = round(src[i]) in format `to`. `dst` holds n elements of `to` (n * size_of(to) bytes).
void narrow(const float* src, void* dst, std::size_t n, Dtype to, Overflow overflow = Overflow::infinity);

class RoundingBatch;
/// narrow() as one part of a write made of several (rounding.hpp): what rounding telemetry counts goes
/// to `batch`, which records the whole write once.
void narrow(const float* src, void* dst, std::size_t n, Dtype to, RoundingBatch& batch,
            Overflow overflow = Overflow::infinity);

/// dst[i] = src[i] widened exactly to float32. `src` holds n elements of `from`.
void widen(const void* src, Dtype from, float* dst, std::size_t n);

} // namespace mixprec::autodiff
