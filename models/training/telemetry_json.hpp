#pragma once
/// Rounding telemetry as JSON, as JsonLinesLogger writes it on step records: one object per entry of
/// amp::Telemetry, in its order,
///
///   {"dense/kernel": {"count": 401408, "zeros": 0, "underflow": 12, "subnormal": 3510, "overflow": 0,
///                     "nonfinite": 0, "amax": 0.0123},
///    "dense/output_grad": {...}, ...}
///
/// and, where the exponent histogram was counted, "log2": {"min": e, "counts": [c0, c1, ...]}: counts[i]
/// values had magnitudes in [2^(e+i), 2^(e+i+1)) before rounding (float32 normal magnitudes only; zeros
/// and non-finite values are in "zeros" and "nonfinite"), from the first nonzero bin to the last. amax
/// has 9 significant digits (enough for float32 to round-trip).

#include <mixprec/amp/telemetry.hpp>

#include <string>

namespace mixprec::models {

std::string telemetry_json(const amp::Telemetry& telemetry);

} // namespace mixprec::models
