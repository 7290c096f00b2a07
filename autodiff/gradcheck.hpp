#pragma once
/// Checks an op's backward against central finite differences.
///
/// For f: inputs -> y, the checked scalar is s = Σᵢ wᵢ yᵢ with fixed random weights w (1/2 ≤ |w| ≤ 3/2),
/// so every output element takes part. The tape gives ∂s/∂x (seeding y's gradient with w); the
/// reference is (s(x + h) - s(x - h)) / (2h) per input element, evaluated in float64 from float32
/// outputs, with h = step · max(1, |x|). An element passes when |analytic - numeric| ≤ atol + rtol |numeric|.
/// Finite differences in float32 carry an error of about ε₃₂ |s| / h (rounding of s) plus h² f''' (the
/// truncation), so with step 1e-2 and O(1) values a tolerance of a few 1e-3 is expected, not 1e-6.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <functional>
#include <string>
#include <vector>

namespace mixprec::autodiff {

using Function = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
    double step = 1e-2; ///< relative finite-difference step
    double rtol = 1e-2; ///< relative tolerance
    double atol = 1e-3; ///< absolute tolerance
    unsigned seed = 7;  ///< for the weights w
};

struct GradcheckResult {
    bool passed = true;
    double max_error = 0; ///< largest |analytic - numeric| - rtol |numeric| seen
    std::string worst;    ///< which element that was, with both values
};

/// Checks f's backward at float32 `inputs`.
GradcheckResult gradcheck(const Function& f, const std::vector<Tensor>& inputs, GradcheckOptions options = {});

/// Checks f's backward in `dtype` against its float32 backward: both run at the same values (inputs
/// rounded to `dtype`), and the `dtype` gradient must match within atol + rtol |g₃₂|, with both
/// tolerances scaled by the largest |g₃₂| of each input (gradients are rounded in `dtype` at every op).
GradcheckResult gradcheck_against_float32(const Function& f, const std::vector<Tensor>& inputs, Dtype dtype,
                                          double rtol, double atol);

} // namespace mixprec::autodiff
