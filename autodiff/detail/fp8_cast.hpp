#pragma once
// Internal: one operand of an FP8 product cast as its Fp8Cast says (ops_fp8.cpp), shared by the dense
// and convolution products in FP8.

#include <mixprec/autodiff/ops_fp8.hpp>

namespace mixprec::autodiff::detail {

struct Fp8Operand {
    Tensor q;      // fp8(t · s)
    float inverse; // 1 / s
};

/// t cast by `how`: its scale from t's amax, then quantized (observed when `how` asks).
/// std::invalid_argument naming `op` and `what` for a missing scale function or a scale that is not
/// positive and finite.
Fp8Operand fp8_operand(const Tensor& t, const Fp8Cast& how, const char* op, const char* what);

} // namespace mixprec::autodiff::detail
