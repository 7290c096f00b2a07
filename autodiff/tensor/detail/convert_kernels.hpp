#pragma once
// Internal: the kernel table behind convert.hpp and the generic loops each SIMD path compiles with its
// own instruction set. The loops live in an unnamed namespace so that every translation unit keeps its
// own copy: a weak symbol compiled for AVX-512 must never be picked for the portable path.

#include <mixprec/autodiff/tensor/format.hpp>

#include <cstddef>
#include <cstring>

namespace mixprec::autodiff::detail {

using narrow_fn = void (*)(const float* src, void* dst, std::size_t n);
using widen_fn = void (*)(const void* src, float* dst, std::size_t n);

/// Indexed by Dtype; entry 0 (float32) is a copy.
struct convert_kernels {
    narrow_fn narrow[dtype_count];
    narrow_fn narrow_saturate[dtype_count];
    widen_fn widen[dtype_count];
};

const convert_kernels& portable_kernels();
const convert_kernels& avx2_kernels();
const convert_kernels& avx512_kernels();      ///< AVX-512 F/BW/VL/DQ only
const convert_kernels& avx512_bf16_kernels(); ///< and AVX512-BF16, and AVX512-VBMI if the CPU has it

namespace {

template <class F, bool Saturate>
void narrow_loop(const float* src, void* dst, std::size_t n) {
    auto* out = static_cast<typename F::storage*>(dst);
    for (std::size_t i = 0; i < n; ++i) out[i] = encode<typename F::spec>(src[i], Saturate);
}

template <class F>
void widen_loop(const void* src, float* dst, std::size_t n) {
    const auto* in = static_cast<const typename F::storage*>(src);
    for (std::size_t i = 0; i < n; ++i) dst[i] = decode<typename F::spec>(in[i]);
}

void copy_narrow(const float* src, void* dst, std::size_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void copy_widen(const void* src, float* dst, std::size_t n) { std::memcpy(dst, src, n * sizeof(float)); }

/// The table of generic loops; a path overrides the entries it has better instructions for.
constexpr convert_kernels generic_kernels() {
    return {
        {copy_narrow, narrow_loop<float16, false>, narrow_loop<bfloat16, false>, narrow_loop<cbfloat16, false>,
         narrow_loop<float8_e4m3, false>, narrow_loop<float8_e5m2, false>},
        {copy_narrow, narrow_loop<float16, true>, narrow_loop<bfloat16, true>, narrow_loop<cbfloat16, true>,
         narrow_loop<float8_e4m3, true>, narrow_loop<float8_e5m2, true>},
        {copy_widen, widen_loop<float16>, widen_loop<bfloat16>, widen_loop<cbfloat16>, widen_loop<float8_e4m3>,
         widen_loop<float8_e5m2>},
    };
}

} // namespace
} // namespace mixprec::autodiff::detail
