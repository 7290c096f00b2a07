#pragma once
// Internal: checks and message pieces shared by the layers' sources.

#include <mixprec/models/layers/layers_core.hpp>

#include <stdexcept>
#include <string>

namespace mixprec::models::detail {

/// "(a, b)".
inline std::string pair_string(Size2 p) { return "(" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + ")"; }

/// std::invalid_argument "<kind>: <what> must be > 0, got (a, b)" when either size is 0.
inline void check_positive(const char* kind, const char* what, Size2 p) {
    if (p[0] != 0 && p[1] != 0) return;
    throw std::invalid_argument(std::string(kind) + ": " + what + " must be > 0, got " + pair_string(p));
}

/// shape_error unless `shape` is (T, D) with T, D ≥ 1: the examples of sequence layers.
inline void require_tokens(const Layer& layer, const Shape& shape) {
    if (shape.rank() != 2 || shape.elements() == 0)
        throw autodiff::shape_error(describe_layer(layer) +
                                    " expects examples of shape (tokens, width) with both ≥ 1, got " +
                                    shape.to_string());
}

} // namespace mixprec::models::detail
