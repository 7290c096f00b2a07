#pragma once
/// Bulk conversion between float32 and the narrow formats: the hot kernel of mixed precision.
///
/// Every path gives the same bits as the scalar `encode`/`decode` of format.hpp. The path is picked at
/// run time from what the CPU has:
///   avx512   AVX-512 F/BW/VL (+ AVX512-BF16's vcvtneps2bf16 when present) and vcvtps2ph/vcvtph2ps
///   avx2     AVX2 + F16C
///   portable plain C++ (what the compiler makes of it for the baseline target)

#include "dtype.hpp"

#include <cstddef>
#include <string_view>
#include <vector>

namespace mixprec::autodiff {

/// What to do with a magnitude that rounds beyond the largest finite value of the target format.
enum class Overflow : unsigned char {
    infinity, ///< ±infinity (NaN for float8_e4m3, which has no infinity): what hardware does
    saturate, ///< ±largest finite value; ±infinity also saturates; NaN stays NaN
};

/// dst[i] = round(src[i]) in format `to`. `dst` holds n elements of `to` (n * size_of(to) bytes).
void narrow(const float* src, void* dst, std::size_t n, Dtype to, Overflow overflow = Overflow::infinity);

/// dst[i] = src[i] widened exactly to float32. `src` holds n elements of `from`.
void widen(const void* src, Dtype from, float* dst, std::size_t n);

/// Instruction-set paths for the kernels above.
enum class SimdPath : unsigned char { portable, avx2, avx512 };

std::string_view name_of(SimdPath path);

/// The paths this CPU can run, portable first.
std::vector<SimdPath> available_simd_paths();

/// The path in use: the best available unless set_simd_path chose another.
SimdPath simd_path();

/// Forces a path (for tests and benchmarks); throws std::invalid_argument if the CPU lacks it.
void set_simd_path(SimdPath path);

/// True when the avx512 path converts to bfloat16 with vcvtneps2bf16 (the CPU has AVX512-BF16).
bool has_avx512_bf16();

} // namespace mixprec::autodiff
