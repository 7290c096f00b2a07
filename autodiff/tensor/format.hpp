#pragma once
/// Floating-point storage formats narrower than float32, and their exact conversions to and from it.
///
/// | type        | sign/exp/mantissa | bias | largest finite | smallest normal | smallest subnormal | specials |
/// |-------------|-------------------|------|----------------|-----------------|--------------------|----------|
/// | float16     | 1/5/10            | 15   | 65504          | 2^-14           | 2^-24              | inf, NaN |
/// | bfloat16    | 1/8/7             | 127  | 3.39e38        | 2^-126          | 2^-133             | inf, NaN |
/// | cbfloat16   | 1/6/9             | 31   | 4.29e9         | 2^-30           | 2^-39              | inf, NaN |
/// | float8_e4m3 | 1/4/3             | 7    | 448            | 2^-6            | 2^-9               | NaN only |
/// | float8_e5m2 | 1/5/2             | 15   | 57344          | 2^-14           | 2^-16              | inf, NaN |
///
/// cbfloat16: Cerebras publishes CB16 as 1 sign, 6 exponent and 9 mantissa bits. mixprec reads it
/// IEEE-style: bias 2^5 - 1 = 31, subnormals when the exponent field is 0, and the all-ones exponent
/// reserved for infinity (mantissa 0) and NaN (mantissa not 0). Largest finite = (2 - 2^-9) * 2^31.
///
/// float8_e4m3 is OCP's E4M3 ("fn" in some libraries): no infinity, S.1111.111 is the only NaN, and the
/// all-ones exponent with any other mantissa is an ordinary number (so the largest finite is 448).
///
/// From float32 (`encode`): round to nearest, ties to even; subnormals kept (never flushed); a
/// magnitude that rounds above the largest finite becomes infinity (NaN for float8_e4m3), or the
/// largest finite with `saturate` (which also maps ±infinity to ±largest finite); NaN stays NaN with its
/// sign, the top mantissa bits of its payload and the quiet bit set. These are the bits the x86
/// instructions vcvtps2ph and vcvtneps2bf16 produce, except that vcvtneps2bf16 flushes float32
/// subnormals to zero and mixprec does not.
///
/// To float32 (`decode`): exact for every pattern. NaN keeps its sign and payload and becomes quiet (as
/// vcvtph2ps does), so a signalling NaN pattern comes back from a round trip quieted; every other
/// pattern round-trips bit for bit.

#include <mixprec/autodiff/tensor/dtype.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace mixprec::autodiff {

/// Bit layout of a binary floating-point format: 1 sign bit, ExpBits, ManBits, exponent Bias.
/// HasInf: IEEE-style specials. Otherwise S.1..1.1..1 is the only NaN and there is no infinity.
template <int ExpBits, int ManBits, int Bias, bool HasInf>
struct format_spec {
    static constexpr int exp_bits = ExpBits;
    static constexpr int man_bits = ManBits;
    static constexpr int bias = Bias;
    static constexpr bool has_inf = HasInf;
    static constexpr int width = 1 + ExpBits + ManBits;
    using storage = std::conditional_t<(width > 8), std::uint16_t, std::uint8_t>;

    static constexpr std::uint32_t sign_mask = 1u << (width - 1);
    static constexpr std::uint32_t man_mask = (1u << ManBits) - 1;
    static constexpr std::uint32_t exp_mask = ((1u << ExpBits) - 1) << ManBits;
    static constexpr std::uint32_t inf_code = exp_mask; // meaningful only when has_inf
    /// The quiet NaN the format produces for a NaN with an empty payload.
    static constexpr std::uint32_t nan_code = HasInf ? exp_mask | (1u << (ManBits - 1)) : exp_mask | man_mask;
    /// Largest finite magnitude, as a bit pattern.
    static constexpr std::uint32_t max_code = HasInf ? exp_mask - 1 : (exp_mask | man_mask) - 1;

    static_assert(ExpBits >= 2 && ManBits >= 1 && width <= 16 && Bias > 0 && Bias <= 127);
};

/// float32 -> format bits (see the file comment for the exact rule). Branch-free, so loops over it
/// vectorize.
template <class S>
[[gnu::always_inline]] constexpr typename S::storage encode(float value, bool saturate = false) noexcept {
    constexpr int shift = 23 - S::man_bits;
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    const std::uint32_t sign = (x >> (32 - S::width)) & S::sign_mask;
    const std::uint32_t a = x & 0x7fffffffu;

    // Normal result: round the float's mantissa at bit `shift`, ties to even; a carry rolls into the
    // exponent, which is then re-biased. (Wraps harmlessly when the result is not normal.)
    const std::uint32_t rounded = (a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1u)) >> shift;
    const std::uint32_t normal = rounded - (std::uint32_t(127 - S::bias) << S::man_bits);

    // Subnormal result: the significand shifted right by s bits, ties to even.
    const std::int32_t e = std::int32_t(a >> 23);
    const std::int32_t target_exp = (e != 0 ? e : 1) - 127 + S::bias;
    const std::uint32_t significand = (a & 0x7fffffu) | (e != 0 ? 0x800000u : 0u);
    const std::int32_t unclamped = shift + 1 - target_exp; // by value: std::clamp's references block vectorizing
    const std::int32_t s = unclamped < 1 ? 1 : unclamped > 31 ? 31 : unclamped;
    const std::uint32_t q = significand >> s;
    const std::uint32_t rest = significand & ((1u << s) - 1);
    const std::uint32_t half = 1u << (s - 1);
    const std::uint32_t round_up = rest > half ? 1u : rest == half ? q & 1u : 0u; // uint32 only: vectorizes
    const std::uint32_t subnormal = q + round_up;

    std::uint32_t r = target_exp >= 1 ? normal : subnormal;
    const std::uint32_t overflow = saturate ? S::max_code : S::has_inf ? S::inf_code : S::nan_code;
    r = r > S::max_code ? overflow : r;
    const std::uint32_t nan = S::has_inf ? S::nan_code | ((a >> shift) & S::man_mask) : S::nan_code;
    r = a > 0x7f800000u ? nan : r;
    return static_cast<typename S::storage>(sign | r);
}

/// Format bits -> float32, exact (see the file comment for NaN).
template <class S>
[[gnu::always_inline]] constexpr float decode(typename S::storage bits) noexcept {
    constexpr int shift = 23 - S::man_bits;
    const std::uint32_t b = bits;
    const std::uint32_t sign = (b & S::sign_mask) << (32 - S::width);
    const std::uint32_t mag = b & (S::sign_mask - 1);
    const std::uint32_t m = mag & S::man_mask;

    const bool special = S::has_inf ? (mag & S::exp_mask) == S::exp_mask : mag == (S::exp_mask | S::man_mask);
    const std::uint32_t special_bits =
        S::has_inf ? 0x7f800000u | (m << shift) | (m != 0 ? 0x400000u : 0u) : 0x7fc00000u;
    const std::uint32_t normal_bits = (mag << shift) + (std::uint32_t(127 - S::bias) << 23);
    std::uint32_t subnormal_bits = mag << shift; // exact for bias 127: float32 subnormals
    if constexpr (S::bias != 127) {
        // m * 2^(1 - bias - man_bits), a normal float32: convert m exactly, then lower its exponent field
        // with an integer add. No float arithmetic, so no rounding mode, flush-to-zero or trap applies.
        constexpr std::uint32_t lower = std::uint32_t(S::bias + S::man_bits - 1) << 23;
        subnormal_bits =
            m == 0 ? 0u : std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(m))) - lower;
    }
    std::uint32_t out = (mag & S::exp_mask) == 0 ? subnormal_bits : normal_bits; // plain selects: vectorizes
    out = special ? special_bits : out;
    return std::bit_cast<float>(sign | out);
}

/// decode<S>(encode<S>(value)): value as format S holds it. For bfloat16, whose values are the float32s
/// with 16 low zero bits, in three integer steps (a loop over them vectorizes to a few instructions):
/// the low half rounded away to nearest even (a carry rolls into the exponent, up to infinity; subnormals
/// alike), a NaN keeping its high half with the quiet bit set.
template <class S>
[[gnu::always_inline]] constexpr float round_trip(float value) noexcept {
    if constexpr (S::width == 16 && S::man_bits == 7 && S::bias == 127) {
        const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
        const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u;
        const std::uint32_t nan = (x | 0x400000u) & 0xffff0000u;
        return std::bit_cast<float>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
    } else {
        return decode<S>(encode<S>(value));
    }
}

/// A scalar stored in format S. Explicit conversions only: math is done in float32 by design.
template <class S>
class basic_float {
  public:
    using spec = S;
    using storage = typename S::storage;

    constexpr basic_float() noexcept = default;
    /// Rounds to nearest even; overflow gives infinity (NaN for float8_e4m3).
    constexpr explicit basic_float(float value) noexcept : bits_(encode<S>(value)) {}
    /// Rounds to nearest even; overflow (and infinity) gives the largest finite value of that sign.
    static constexpr basic_float saturating(float value) noexcept { return from_bits(encode<S>(value, true)); }
    static constexpr basic_float from_bits(storage bits) noexcept {
        basic_float r;
        r.bits_ = bits;
        return r;
    }

    constexpr storage bits() const noexcept { return bits_; }
    constexpr explicit operator float() const noexcept { return decode<S>(bits_); }

    /// Value comparison, as for float: NaN is unequal to everything and +0 == -0.
    friend constexpr bool operator==(basic_float a, basic_float b) noexcept { return float(a) == float(b); }

  private:
    storage bits_ = 0;
};

using float16 = basic_float<format_spec<5, 10, 15, true>>;
using bfloat16 = basic_float<format_spec<8, 7, 127, true>>;
using cbfloat16 = basic_float<format_spec<6, 9, 31, true>>;
using float8_e4m3 = basic_float<format_spec<4, 3, 7, false>>;
using float8_e5m2 = basic_float<format_spec<5, 2, 15, true>>;

static_assert(sizeof(float16) == 2 && sizeof(float8_e4m3) == 1 && std::is_trivially_copyable_v<float16>);

/// The Dtype of a C++ element type: dtype_of<float16> == Dtype::float16.
template <class T>
inline constexpr Dtype dtype_of = [] {
    static_assert(!sizeof(T*), "not a mixprec element type");
    return Dtype::float32;
}();
template <>
inline constexpr Dtype dtype_of<float> = Dtype::float32;
template <>
inline constexpr Dtype dtype_of<float16> = Dtype::float16;
template <>
inline constexpr Dtype dtype_of<bfloat16> = Dtype::bfloat16;
template <>
inline constexpr Dtype dtype_of<cbfloat16> = Dtype::cbfloat16;
template <>
inline constexpr Dtype dtype_of<float8_e4m3> = Dtype::float8_e4m3;
template <>
inline constexpr Dtype dtype_of<float8_e5m2> = Dtype::float8_e5m2;

} // namespace mixprec::autodiff

#include <mixprec/autodiff/tensor/format_limits.hpp>
