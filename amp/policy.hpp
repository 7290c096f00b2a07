#pragma once
/// Dtype policies, as in Keras: a policy names the dtype layers compute in and the dtype their
/// variables are kept in. mixprec keeps variables in float32 under every policy (the masters); layers
/// read a working copy in the compute dtype.
///
///   "float32"          compute float32,   variables float32
///   "mixed_float16"    compute float16,   variables float32   (use a LossScaleOptimizer)
///   "mixed_bfloat16"   compute bfloat16,  variables float32
///   "mixed_cbfloat16"  compute cbfloat16, variables float32   (use a LossScaleOptimizer)
///   "mixed_float8"     compute bfloat16,  variables float32, and Dense layers' products in FP8: inputs
///                      and kernels in float8_e4m3, gradients in float8_e5m2, each with its own scale
///                      (the "hybrid" recipe; use a LossScaleOptimizer made with Fp8ScalingOptions,
///                      whose scales a training step hands to the layers: amp/fp8_scaling.hpp)
///   "mixed_mxfp8"      compute bfloat16,  variables float32, and Dense layers' products in MXFP8: every
///                      operand in blocks of 32 along the summed axis, each block with its own power-of-two
///                      scale (OCP MX v1.0; e4m3 forward, e5m2 backward: autodiff/ops_mx.hpp). Needs no
///                      scaling state and no loss scaling, and evaluates in MXFP8 too.

#include <mixprec/autodiff/tensor/dtype.hpp>

#include <string>
#include <string_view>

namespace mixprec::amp {

class Policy {
  public:
    /// One of the names above; std::invalid_argument listing them otherwise.
    explicit Policy(std::string_view name = "float32");

    const std::string& name() const { return name_; }
    autodiff::Dtype compute_dtype() const { return compute_; }
    autodiff::Dtype variable_dtype() const { return autodiff::Dtype::float32; }
    /// True when gradients are computed in a dtype narrower than float32's range needs loss scaling
    /// (float16, cbfloat16); bfloat16 has float32's exponent range.
    bool needs_loss_scaling() const;
    /// True for mixed_float8: Dense layers multiply in FP8 (autodiff::dense_fp8) when a training step
    /// gives them scales, except the layers set_fp8(false) exempts.
    bool fp8_products() const;
    /// True for mixed_mxfp8: Dense layers multiply MXFP8 operands (autodiff::dense_mxfp8), in training and
    /// evaluation, except the layers set_fp8(false) exempts.
    bool mx_products() const;

    friend bool operator==(const Policy& a, const Policy& b) { return a.name_ == b.name_; }

  private:
    std::string name_;
    autodiff::Dtype compute_;
};

/// The policy layers use unless they are given their own (initially "float32"). Per thread.
const Policy& global_policy();
void set_global_policy(const Policy& policy);
inline void set_global_policy(std::string_view name) { set_global_policy(Policy(name)); }

} // namespace mixprec::amp
