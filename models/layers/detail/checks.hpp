#pragma once
// Internal: checks and message pieces shared by the layers' sources.

#include <mixprec/models/layers/layers_core.hpp>

#include <span>
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

/// shape_error unless `got`, the input of a call, is a batch of examples of shape `example`: a tensor of
/// rank example.rank() + 1 whose dimensions after the first (the batch axis) are the example's. Every
/// layer's call checks its input here (Layer::operator()). The message names the layer, the example's
/// shape, the rank and shape a batch of them has, and the shape and rank it got; a single example
/// without the batch axis is told to add it, and a batch of other examples shows their shape:
///   layer 'flatten' (Flatten) expects a batch of examples of shape (28, 28), i.e. a tensor of rank 3
///   (batch, 28, 28); got a tensor of shape (28, 28) (rank 2): add the batch axis (one example is a batch
///   of 1, shape (1, 28, 28))
inline void check_batch(const Layer& layer, const Shape& example, const Shape& got) {
    bool fits = got.rank() == example.rank() + 1;
    for (std::size_t i = 0; fits && i < example.rank(); ++i) fits = got[i + 1] == example[i];
    if (fits) return;
    std::string with_batch = "(batch", single = "(1";
    for (std::size_t d : example) {
        with_batch += ", " + std::to_string(d);
        single += ", " + std::to_string(d);
    }
    std::string message = describe_layer(layer);
    message += " expects a batch of examples of shape " + example.to_string() + ", i.e. a tensor of rank " +
               std::to_string(example.rank() + 1) + " " + with_batch + "); got a tensor of shape " + got.to_string() +
               " (rank " + std::to_string(got.rank()) + ")";
    if (got == example) {
        message += ": add the batch axis (one example is a batch of 1, shape " + single + "))";
    } else if (got.rank() == example.rank() + 1) {
        message += ", whose examples have shape " +
                   Shape(std::span<const std::size_t>(got.begin() + 1, got.rank() - 1)).to_string();
    }
    throw autodiff::shape_error(message);
}

/// shape_error unless `shape` is (T, D) with T, D ≥ 1: the examples of sequence layers.
inline void require_tokens(const Layer& layer, const Shape& shape) {
    if (shape.rank() != 2 || shape.elements() == 0)
        throw autodiff::shape_error(describe_layer(layer) +
                                    " expects examples of shape (tokens, width) with both ≥ 1, got " +
                                    shape.to_string());
}

} // namespace mixprec::models::detail
