#include <mixprec/autodiff/tensor/kernels_mx.hpp>

#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/mx.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mixprec::autodiff::kernels {
namespace {

/// Checked here, before the rows are split over threads: an exception must not leave a parallel region.
void check_element(Dtype element) {
    if (element != Dtype::float8_e4m3 && element != Dtype::float8_e5m2)
        throw std::invalid_argument("mx_round: element dtype must be float8_e4m3 or float8_e5m2, not " +
                                    std::string(name_of(element)));
}

/// Where the rounding reads and writes: a float32 x is read in place and rounded into new storage; any
/// other dtype is widened once into the result, which is then rounded in place.
struct Rounding {
    Tensor out;
    const float* src;
    float* dst;
};
Rounding rounding_of(const Tensor& x) {
    Rounding r{x.dtype() == Dtype::float32 ? Tensor::uninitialized(x.shape()) : x.to(Dtype::float32), nullptr, nullptr};
    r.dst = r.out.data<float>().data();
    r.src = x.dtype() == Dtype::float32 ? x.data<float>().data() : r.dst;
    return r;
}

} // namespace

Tensor mx_round(const Tensor& x, Dtype element) {
    check_element(element);
    const std::size_t cols = x.rank() == 0 ? 1 : x.shape()[x.rank() - 1];
    const std::size_t rows = cols == 0 ? 0 : x.size() / cols;
    const Rounding r = rounding_of(x);
    // Rows are independent: the same bits however they are spread over the threads.
    const std::size_t min_rows = std::max<std::size_t>(1, 16384 / std::max<std::size_t>(cols, 1));
    autodiff::detail::split(rows, min_rows, [&](std::size_t r0, std::size_t r1) {
        autodiff::mx_round(r.src + r0 * cols, r1 - r0, cols, element, r.dst + r0 * cols);
    });
    return r.out;
}

Tensor mx_round_columns(const Tensor& x, Dtype element) {
    check_element(element);
    if (x.rank() != 2) throw shape_error("mx_round_columns: " + x.shape().to_string() + " must have rank 2");
    const std::size_t rows = x.shape()[0], cols = x.shape()[1];
    const Rounding r = rounding_of(x);
    // Bands of 32 rows (a block down every column) are independent; each piece is whole bands.
    const std::size_t bands = (rows + mx_block_size - 1) / mx_block_size;
    const std::size_t min_bands = std::max<std::size_t>(1, 512 / std::max<std::size_t>(cols, 1));
    autodiff::detail::split(bands, min_bands, [&](std::size_t b0, std::size_t b1) {
        const std::size_t r0 = b0 * mx_block_size, r1 = std::min(rows, b1 * mx_block_size);
        autodiff::mx_round_columns(r.src + r0 * cols, r1 - r0, cols, element, r.dst + r0 * cols);
    });
    return r.out;
}

} // namespace mixprec::autodiff::kernels
