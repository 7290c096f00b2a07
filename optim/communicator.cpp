#include <mixprec/optim/communicator.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/rounding_tally.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mixprec::optim {

bool is_16_bit_float(autodiff::Dtype dtype) {
    return dtype == autodiff::Dtype::float16 || dtype == autodiff::Dtype::bfloat16 ||
           dtype == autodiff::Dtype::cbfloat16;
}

namespace {

void check_16_bit(autodiff::Dtype dtype) {
    if (!is_16_bit_float(dtype))
        throw std::invalid_argument("Communicator::sum of 16-bit values: " + std::string(autodiff::name_of(dtype)) +
                                    " is not a 16-bit float (float16, bfloat16 or cbfloat16)");
}

} // namespace

void SingleProcess::sum(std::span<std::uint16_t>, autodiff::Dtype dtype) { check_16_bit(dtype); }

void add_16_bit(const std::uint16_t* a, std::uint16_t* b_and_out, std::size_t n, autodiff::Dtype dtype) {
    check_16_bit(dtype);
    constexpr std::size_t chunk = 1024;
    float x[chunk], y[chunk];
    for (std::size_t i = 0; i < n; i += chunk) {
        const std::size_t m = std::min(chunk, n - i);
        autodiff::widen(a + i, dtype, x, m);
        autodiff::widen(b_and_out + i, dtype, y, m);
        for (std::size_t k = 0; k < m; ++k) y[k] += x[k];
        // Not rounding telemetry: the sum is transport, not a value the step computed.
        autodiff::detail::narrow_unrecorded(y, b_and_out + i, m, dtype, autodiff::Overflow::infinity);
    }
}

} // namespace mixprec::optim
