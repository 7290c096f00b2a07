#include <mixprec/autodiff/tensor/dtype.hpp>

#include <array>
#include <ostream>
#include <stdexcept>
#include <string>

namespace mixprec::autodiff {
namespace {

constexpr std::array<std::string_view, dtype_count> names{"float32",   "float16",     "bfloat16",
                                                          "cbfloat16", "float8_e4m3", "float8_e5m2"};
constexpr std::array<std::size_t, dtype_count> sizes{4, 2, 2, 2, 1, 1};

} // namespace

std::size_t size_of(Dtype dtype) { return sizes.at(static_cast<std::size_t>(dtype)); }

std::string_view name_of(Dtype dtype) { return names.at(static_cast<std::size_t>(dtype)); }

Dtype parse_dtype(std::string_view name) {
    for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return static_cast<Dtype>(i);
    std::string valid;
    for (auto n : names) valid += (valid.empty() ? "" : ", ") + std::string(n);
    throw std::invalid_argument("unknown dtype '" + std::string(name) + "' (valid: " + valid + ")");
}

std::ostream& operator<<(std::ostream& os, Dtype dtype) { return os << name_of(dtype); }

} // namespace mixprec::autodiff
