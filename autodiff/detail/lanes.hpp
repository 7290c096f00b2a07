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
/// 8 lanes: one AVX2 register, for a kernel that takes each 16 lanes' halves in turn at that level.
using f32x8 = float __attribute__((vector_size(32)));
using u32x8 = std::uint32_t __attribute__((vector_size(32)));

template <class F = f32x16>
[[gnu::always_inline]] inline F load_lanes(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <class F>
[[gnu::always_inline]] inline void store_lanes(float* p, F v) {
    std::memcpy(p, &v, sizeof v);
}

// Masks (all ones or 0 a lane) and selects on 16 or 8 lanes (U: u32x16 or u32x8), in two forms that give
// the same bits. Wide (the level's registers hold the vector whole: 16 lanes at AVX-512, 8 from AVX2 up):
// comparisons and ?:, an instruction each (at AVX-512 a select merging into a load, at AVX2 a blend).
// Otherwise integer arithmetic (and, or, not, shifts), which GCC splits into the level's registers, where
// it lowers a comparison or a ?: on vectors wider than them lane by lane with a branch each (the AVX2 and
// SSE levels ran the first layer's weights pass five to nine times slower for it); at AVX-512 that form
// costs a third more instructions in that pass. Results come back through a reference: a 64-byte vector
// returned by value draws GCC's ABI warning (-Wpsabi) below AVX-512.

/// lane: 0, 1, 2, … in lane order.
template <class U>
[[gnu::always_inline]] inline void lane_numbers(U& lane) {
    for (std::uint32_t i = 0; i < sizeof(U) / sizeof(std::uint32_t); ++i) lane[i] = i;
}
/// mask: all ones in the lanes where x is 0, else 0 ((x | −x) has its top bit set unless x is 0).
template <bool Wide, class U>
[[gnu::always_inline]] inline void zero_lanes(U& mask, const U& x) {
    if constexpr (Wide) {
        mask = __builtin_bit_cast(U, x == 0u);
    } else {
        mask = ((x | (0u - x)) >> 31) - 1u;
    }
}
/// mask: all ones in the lanes i ≥ n (n from 1 to the lanes' count), else 0.
template <bool Wide, class U>
[[gnu::always_inline]] inline void lanes_from(U& mask, std::uint32_t n) {
    U lane;
    lane_numbers(lane);
    if constexpr (Wide) {
        mask = __builtin_bit_cast(U, lane >= n);
    } else {
        mask = 0u - ((n - 1u - lane) >> 31);
    }
}
/// v's lanes where mask is all ones replaced by a's, bit for bit.
template <bool Wide, class F, class U>
[[gnu::always_inline]] inline void take_lanes(F& v, const U& mask, const F& a) {
    if constexpr (Wide) {
        v = mask != 0u ? a : v;
    } else {
        U bits, from;
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
