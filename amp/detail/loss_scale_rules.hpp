#pragma once
// Internal: the table of loss-scale rules (loss_scale_rules.cpp), one entry per ScaleRule, in its order:
// the rule's name, the options of its preset and the function that moves the scale after each step.

#include <mixprec/amp/loss_scale.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace mixprec::amp::detail {

/// What a rule works on during one update: the state it moves and the options it reads.
struct RuleStep {
    LossScaleState& s;
    const LossScaleOptions& o;
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
    void (*step)(RuleStep&, bool finite);
};

inline constexpr std::size_t rule_count = static_cast<std::size_t>(ScaleRule::count);

/// Every rule, at the position of its ScaleRule.
const std::array<Rule, rule_count>& scale_rules();

/// A number as it reads best in a message: 0.5, 65536, inf.
std::string number_text(double v);

} // namespace mixprec::amp::detail
