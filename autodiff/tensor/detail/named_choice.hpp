#pragma once
// Internal: choices that have names (Float32Gemm, ConvBackend): a table of them, lookups both ways, and
// a process-wide choice read from an environment variable at first use (MIXPREC_GEMM, MIXPREC_CONV_ROUTE).

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace mixprec::autodiff::detail {

template <class T, std::size_t N>
using name_table = std::array<std::pair<T, std::string_view>, N>;

/// The name of `value` in `table` ("?" if it has none).
template <class T, std::size_t N>
std::string_view name_in(const name_table<T, N>& table, T value) {
    for (const auto& [v, name] : table)
        if (v == value) return name;
    return "?";
}

/// The value called `name` in `table`; std::invalid_argument "no <what> is called '<name>' (the choices:
/// ...)" for any other name.
template <class T, std::size_t N>
T named_in(const name_table<T, N>& table, std::string_view name, const char* what) {
    std::string choices;
    for (const auto& [v, n] : table) {
        if (n == name) return v;
        choices += (choices.empty() ? "" : ", ") + std::string(n);
    }
    throw std::invalid_argument("no " + std::string(what) + " is called '" + std::string(name) +
                                "' (the choices: " + choices + ")");
}

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

/// The process's choice of T: env_choice's at first use, then whatever is stored (one per T).
template <class T, class Named>
std::atomic<T>& process_choice(const char* variable, T fallback, Named named) {
    static std::atomic<T> choice{env_choice(variable, fallback, named)};
    return choice;
}

} // namespace mixprec::autodiff::detail
