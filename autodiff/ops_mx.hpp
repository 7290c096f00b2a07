#pragma once
/// Products of MXFP8 operands (OCP Microscaling v1.0): the three GEMMs of a dense layer with every operand
/// quantized in blocks of 32 values along the axis its product sums over, each block with its own
/// power-of-two scale (autodiff/tensor/mx.hpp). No scale is kept from step to step: each block's comes
/// from its own values, so the products need no training state and run the same in evaluation.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <optional>

namespace mixprec::autodiff {

/// The element formats of a dense layer's MX operands: the "hybrid" recipe, e4m3 for the input and the
/// kernel, e5m2 for the gradient flowing back into the output. Each is float8_e4m3 or float8_e5m2.
struct MxDenseFormats {
    Dtype input = Dtype::float8_e4m3;
    Dtype kernel = Dtype::float8_e4m3;
    Dtype output_grad = Dtype::float8_e5m2;
};

/// A dense layer's product with MXFP8 operands, for x (batch, in) or (batch, seq, in), w (in, out) and an
/// optional bias (out,) in x's dtype. mx(t, axis) is t rounded in MX blocks along `axis`:
///
///   y  = mx(x, in) · mx(w, in) + bias          blocks along in    in x's dtype
///   dx = mx(dy, out) · mx(w, out)ᵀ             blocks along out   in x's dtype
///   dw = mx(x, batch)ᵀ · mx(dy, batch)         blocks along batch in w's dtype
///   dbias = Σ dy                               (from dy, not its MX rounding)
///
/// as Transformer Engine's MXFP8 recipe quantizes each operand once along rows and once along columns.
/// The decoded values and their products are exact in float32; the products are summed in float32 and
/// each result is rounded once. Gradients pass straight through the roundings. The backward pass keeps x
/// and w (in their own dtypes) and rounds them again along the other axis.
Tensor dense_mxfp8(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias,
                   const MxDenseFormats& formats = {});

} // namespace mixprec::autodiff
