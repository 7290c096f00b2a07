#pragma once
/// Instruction-set levels: which of mixprec's kernels run, chosen from what the CPU has and capped by the
/// environment variable MIXPREC_ISA.
///
///   level         mixprec's kernels use                                    oneDNN capped at   e.g.
///   portable      plain C++ for the x86-64 baseline (SSE2)                  sse41              any x86-64
///   avx2          AVX2, F16C and FMA                                        avx2               Haswell, Zen 1-3
///   avx512        AVX-512 F, BW, VL and DQ                                  avx512_core        Skylake-X
///   avx512_bf16   the above, AVX512-BF16, and AVX512-VBMI where present     avx512_core_bf16   Cooper Lake, Zen 4,
///                                                                                                 Sapphire Rapids
/// `MIXPREC_ISA=native`, or no MIXPREC_ISA, means the best level the CPU has with oneDNN left uncapped (so
/// it may use AMX). A value that names no level, or a level the CPU lacks, is an isa_error at first use.
///
/// What the level changes, and what it does not:
/// - Conversions, elementwise kernels, optimizer updates, the unscale pass and the loss-scale rules give
///   the same bits at every level (tests/test_isa.cpp checks each at every level the CPU has).
/// - bfloat16 matrix products and convolutions run on oneDNN at avx512_bf16 and above, on OpenBLAS sgemm
///   below; they agree up to float32 summation order (see kernels_matmul.hpp). Convolutions of every
///   other dtype run on oneDNN's primitives from avx2 up and on im2col with OpenBLAS at portable (ops_conv.hpp).
/// - OpenBLAS picks its kernels from the CPU whatever the level (it reads OPENBLAS_CORETYPE, not
///   MIXPREC_ISA), so float32 sums may be ordered differently on another CPU or thread count.

#include <stdexcept>
#include <string_view>
#include <vector>

namespace mixprec::autodiff {

/// The levels, lowest first.
enum class Isa : unsigned char { portable, avx2, avx512, avx512_bf16 };

/// MIXPREC_ISA named no level, or one above what the CPU has, or set_isa asked for a level above the cap.
class isa_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

std::string_view name_of(Isa level);

/// The best level this CPU has, whatever MIXPREC_ISA says.
Isa cpu_isa();

/// The highest level mixprec may use: MIXPREC_ISA's, or cpu_isa() when it is `native` or unset.
Isa max_isa();

/// The levels mixprec may use (portable up to max_isa()), lowest first.
std::vector<Isa> available_isas();

/// The level in use: max_isa() unless set_isa chose another.
Isa isa();

/// Runs mixprec's own kernels at `level` from now on, in every thread (for tests and benchmarks). oneDNN
/// keeps the cap it was given at its first use. Throws isa_error above max_isa().
void set_isa(Isa level);

/// True when the CPU has AVX512-VBMI (used at avx512_bf16 and above).
bool cpu_has_avx512_vbmi();

} // namespace mixprec::autodiff
