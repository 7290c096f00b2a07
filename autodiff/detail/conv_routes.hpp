#pragma once
// Internal: what ConvBackend::measured has chosen in this process (conv_backend.cpp), for conv2d.

#include <mixprec/autodiff/ops_conv.hpp>

#include <optional>
#include <string>

namespace mixprec::autodiff::detail {

/// The backend measured for `key` (a pass, shape and dtype), if one was.
std::optional<ConvBackend> measured_choice(const std::string& key);
/// Records `backend` for `key` with its report `line`, unless another thread recorded one first; returns
/// the backend recorded.
ConvBackend record_measured_choice(const std::string& key, ConvBackend backend, std::string line);

} // namespace mixprec::autodiff::detail
