#pragma once
/// std::numeric_limits for mixprec's narrow formats (included by format.hpp).

#include <cstdint>
#include <limits>

namespace mixprec::autodiff {
template <class S>
class basic_float;
}

template <class S>
class std::numeric_limits<mixprec::autodiff::basic_float<S>> {
    using T = mixprec::autodiff::basic_float<S>;
    static constexpr T bits(std::uint32_t b) { return T::from_bits(static_cast<typename S::storage>(b)); }
    static constexpr int max_biased_exp = S::has_inf ? (1 << S::exp_bits) - 2 : (1 << S::exp_bits) - 1;

  public:
    static constexpr bool is_specialized = true;
    static constexpr bool is_signed = true;
    static constexpr bool is_integer = false;
    static constexpr bool is_exact = false;
    static constexpr bool has_infinity = S::has_inf;
    static constexpr bool has_quiet_NaN = true;
    static constexpr bool has_signaling_NaN = S::has_inf;
    static constexpr std::float_denorm_style has_denorm = std::denorm_present;
    static constexpr bool has_denorm_loss = false;
    static constexpr std::float_round_style round_style = std::round_to_nearest;
    static constexpr bool is_iec559 = S::exp_bits == 5 && S::man_bits == 10; // only binary16 is IEEE
    static constexpr bool is_bounded = true;
    static constexpr bool is_modulo = false;
    static constexpr int digits = S::man_bits + 1;
    static constexpr int digits10 = (digits - 1) * 30103 / 100000;   // floor((p-1) log10 2)
    static constexpr int max_digits10 = 2 + digits * 30103 / 100000; // ceil(1 + p log10 2)
    static constexpr int radix = 2;
    static constexpr int min_exponent = 2 - S::bias;
    static constexpr int min_exponent10 = (min_exponent - 1) * 30103 / 100000;
    static constexpr int max_exponent = max_biased_exp - S::bias + 1;
    static constexpr int max_exponent10 = (max_exponent - 1) * 30103 / 100000;
    static constexpr bool traps = false;
    static constexpr bool tinyness_before = false;

    static constexpr T min() noexcept { return bits(1u << S::man_bits); }
    static constexpr T lowest() noexcept { return bits(S::sign_mask | S::max_code); }
    static constexpr T max() noexcept { return bits(S::max_code); }
    static constexpr T epsilon() noexcept { return bits(std::uint32_t(S::bias - S::man_bits) << S::man_bits); }
    static constexpr T round_error() noexcept { return bits(std::uint32_t(S::bias - 1) << S::man_bits); }
    /// Infinity where the format has one; its NaN otherwise (as for any type without infinity).
    static constexpr T infinity() noexcept { return bits(S::has_inf ? S::inf_code : S::nan_code); }
    static constexpr T quiet_NaN() noexcept { return bits(S::nan_code); }
    static constexpr T signaling_NaN() noexcept { return bits(S::has_inf ? S::exp_mask | 1u : S::nan_code); }
    static constexpr T denorm_min() noexcept { return bits(1); }
};
