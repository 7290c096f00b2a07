#pragma once
// Internal: the matrix product of a layer with products (Dense, and the projections of attention and
// transformer blocks), in the precision the layer's policy and FP8 choice ask for.

#include <mixprec/models/layers/layer.hpp>

#include <optional>
#include <string>

namespace mixprec::models::detail {

/// x (..., in) · w (in, out) + bias: under mixed_float8 with per-tensor scales (autodiff::dense_fp8, the
/// casts of product `name`) when `fp8` and the step gives scales; under mixed_mxfp8 in MX blocks
/// (autodiff::dense_mxfp8) when `fp8`; else autodiff::dense. The product runs on the rows of x, and the
/// leading axes come back afterwards.
Tensor product(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const amp::Policy& policy, bool fp8,
               const CallContext& context, const std::string& name);

} // namespace mixprec::models::detail
