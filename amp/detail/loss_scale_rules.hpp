#pragma once
// Internal: the table of loss-scale rules (loss_scale_rules.cpp), one entry per ScaleRule, in its order:
// the rule's name, the options of its preset and the function that moves the scale after each step.

#include <mixprec/amp/loss_scale.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mixprec::amp::detail {

/// How a rule multiplies the float32 scale by a growth or backoff factor (a double in the options).
enum class Product : std::uint8_t {
    float64, ///< float32(double(scale) × factor): PyTorch's kernel (the factor is a double there)
    float32, ///< scale × float32(factor) in float32: Megatron's and TensorFlow's float32 tensors
};

/// What a rule works on during one update: the state it moves and the options it reads.
struct RuleStep {
    LossScaleState& s;
    const LossScaleOptions& o;
    Product product;
    float times(float scale, double factor) const;
    /// scale × growth_factor, unless that is not finite or exceeds max_scale; counts a growth.
    void grow();
    /// scale × backoff_factor, not below `floor` (nor 2^-126); counts a backoff. loss_scale_error when the
    /// scale already sits at `floor` and at_min_scale is raise.
    void back_off(float floor);
};

struct Rule {
    ScaleRule rule;
    std::string_view name;   ///< the preset's name: "pytorch", ...
    LossScaleOptions preset; ///< the library's defaults (preset.rule == rule)
    Product product;         ///< how the library rounds scale × factor
    std::string_view reads;  ///< the options it reads besides those every rule reads, space-separated
    void (*step)(RuleStep&, bool finite);
};

inline constexpr std::size_t rule_count = static_cast<std::size_t>(ScaleRule::count);

/// Every rule, at the position of its ScaleRule.
const std::array<Rule, rule_count>& scale_rules();

/// A number as it reads best in a message: 0.5, 65536, inf.
std::string number_text(double v);

} // namespace mixprec::amp::detail
