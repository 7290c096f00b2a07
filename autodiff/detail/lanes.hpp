#pragma once
// Internal: 16 lanes of 32-bit elements as GCC's generic vectors, for the kernels of the convolution and
// its pooling (pool_2x2.hpp, blocked.hpp, pooled_weights.hpp, conv/common.hpp) that run one order of
// operations at every instruction-set level: each level lowers a vector to one AVX-512 register, two AVX2
// or four SSE ones.

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

[[gnu::always_inline]] inline f32x16 load_lanes(const float* p) {
    f32x16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
[[gnu::always_inline]] inline void store_lanes(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }

// Masks (all ones or 0 a lane) and selects on 16 lanes, in two forms that give the same bits. Wide
// (AVX-512, whose registers hold 16 lanes): comparisons and ?:, an instruction each, a select merging
// into a load. Otherwise integer arithmetic (and, or, not, shifts), which GCC splits into the level's
// registers, where it lowers a comparison or a ?: on vectors wider than them lane by lane with a branch
// each (the AVX2 and SSE levels ran the first layer's weights pass five to nine times slower for it); at
// AVX-512 that form costs a third more instructions in that pass. Results come back through a reference: a
// 64-byte vector returned by value draws GCC's ABI warning (-Wpsabi) below AVX-512.

/// mask: all ones in the lanes where x is 0, else 0 ((x | −x) has its top bit set unless x is 0).
template <bool Wide>
[[gnu::always_inline]] inline void zero_lanes(u32x16& mask, const u32x16& x) {
    if constexpr (Wide) {
        mask = __builtin_bit_cast(u32x16, x == 0u);
    } else {
        mask = ((x | (0u - x)) >> 31) - 1u;
    }
}
/// mask: all ones in the lanes i ≥ n (n from 1 to 16), else 0.
template <bool Wide>
[[gnu::always_inline]] inline void lanes_from(u32x16& mask, std::uint32_t n) {
    const u32x16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    if constexpr (Wide) {
        mask = __builtin_bit_cast(u32x16, lane >= n);
    } else {
        mask = 0u - ((n - 1u - lane) >> 31);
    }
}
/// v's lanes where mask is all ones replaced by a's, bit for bit.
template <bool Wide>
[[gnu::always_inline]] inline void take_lanes(f32x16& v, const u32x16& mask, const f32x16& a) {
    if constexpr (Wide) {
        v = mask != 0u ? a : v;
    } else {
        u32x16 bits, from;
        std::memcpy(&bits, &v, sizeof v);
        std::memcpy(&from, &a, sizeof a);
        bits = (from & mask) | (bits & ~mask);
        std::memcpy(&v, &bits, sizeof v);
    }
}

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
