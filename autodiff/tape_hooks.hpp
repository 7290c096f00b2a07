#pragma once
/// The one call a Variable makes into the tapes (implemented in tape.cpp), kept apart so that
/// variable.cpp does not depend on the tape.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>

namespace mixprec::autodiff {

/// Variable `variable_uid` was read and gave `value`: recording tapes that watch accessed variables
/// start watching `value` and remember it as that variable's.
void notify_variable_read(std::uint64_t variable_uid, const Tensor& value);

} // namespace mixprec::autodiff
