#pragma once
/// Runtime element types of a Tensor.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace mixprec::autodiff {

/// The storage format of a tensor's elements. Arithmetic always happens in float32; the dtype says
/// how results are stored (and so where they round, overflow and underflow).
enum class Dtype : std::uint8_t {
    float32,     ///< IEEE binary32
    float16,     ///< IEEE binary16: 1/5/10, max 65504
    bfloat16,    ///< brain float: 1/8/7, float32's range
    cbfloat16,   ///< Cerebras CB16: 1/6/9, bias 31 (see format.hpp for our reading of it)
    float8_e4m3, ///< OCP FP8 E4M3 ("fn"): no infinity, max 448
    float8_e5m2, ///< OCP FP8 E5M2: IEEE-style specials, max 57344
};

inline constexpr int dtype_count = 6;

/// Bytes per element: 4, 2, 2, 2, 1, 1.
std::size_t size_of(Dtype dtype);

/// The name used in messages and policies: "float32", "float16", "bfloat16", ...
std::string_view name_of(Dtype dtype);

/// Parses a name produced by name_of; throws std::invalid_argument listing the valid names.
Dtype parse_dtype(std::string_view name);

std::ostream& operator<<(std::ostream& os, Dtype dtype); ///< writes name_of(dtype)

} // namespace mixprec::autodiff
