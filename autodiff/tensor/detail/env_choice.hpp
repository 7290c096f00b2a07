#pragma once
// Internal: a process-wide choice read from an environment variable at first use (MIXPREC_GEMM,
// MIXPREC_CONV_ROUTE), by name.

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mixprec::autodiff::detail {

/// named(value of `variable`) when it is set and not empty, else `fallback`; a name `named` refuses is an
/// std::invalid_argument that starts with the variable's name.
template <class T, class Named>
T env_choice(const char* variable, T fallback, Named named) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') return fallback;
    try {
        return named(std::string_view(value));
    } catch (const std::invalid_argument& error) {
        throw std::invalid_argument(std::string(variable) + ": " + error.what());
    }
}

} // namespace mixprec::autodiff::detail
