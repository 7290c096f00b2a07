#pragma once
// Internal: 16 lanes of 32-bit elements as GCC's generic vectors, for the kernels of the convolution and
// its pooling (pool_2x2.hpp, pooled_weights.hpp, conv/common.hpp) that run one order of operations at every
// instruction-set level: each level lowers a vector to one AVX-512 register, two AVX2 or four SSE ones.

#include <cstddef>
#include <cstdint>
#include <cstring>

// The helpers below pass 64-byte vectors by value, which GCC warns changes the ABI below AVX-512: they
// are always inlined, so no call crosses an ABI.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mixprec::autodiff::detail {

/// Lanes of work: one AVX-512 vector of 32-bit elements.
constexpr std::size_t vector_lanes = 16;

/// 16 lanes as GCC's generic vectors (one AVX-512 register, two AVX2 or four SSE ones).
using f32x16 = float __attribute__((vector_size(64)));
using u32x16 = std::uint32_t __attribute__((vector_size(64)));
using i32x16 = std::int32_t __attribute__((vector_size(64))); // lane masks: all ones or 0

[[gnu::always_inline]] inline f32x16 load_lanes(const float* p) {
    f32x16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
[[gnu::always_inline]] inline void store_lanes(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }

/// The sum of 16 lanes, folded pairwise (lane l + 8 into lane l, then l + 4, l + 2, l + 1): one order at
/// every level.
[[gnu::always_inline]] inline float fold_lanes(const float* lanes) {
    using f32x8 = float __attribute__((vector_size(32)));
    using f32x4 = float __attribute__((vector_size(16)));
    const f32x16 v = load_lanes(lanes);
    const f32x8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                    __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const f32x4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (b[0] + b[2]) + (b[1] + b[3]);
}

} // namespace mixprec::autodiff::detail

#pragma GCC diagnostic pop
