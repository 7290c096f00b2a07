#pragma once
// Internal: splitting work whose pieces give the same bits however they are split (elementwise loops,
// independent rows or lanes, whole products of a batch) over the OpenMP pool that OpenBLAS and oneDNN
// use too. Include only from .cpp files.

#include <omp.h>

#include <algorithm>
#include <cstddef>

namespace mixprec::autodiff::detail {

/// Calls part(begin, end) on consecutive pieces of [0, n), one per thread, each at least `min_piece`
/// long (one piece, on the calling thread, when n is smaller or inside a parallel region already).
template <class Part>
void split(std::size_t n, std::size_t min_piece, Part part) {
    const auto threads = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
    const std::size_t parts =
        omp_in_parallel() ? 1 : std::clamp<std::size_t>(n / std::max<std::size_t>(min_piece, 1), 1, threads);
    if (parts == 1) {
        part(std::size_t{0}, n);
        return;
    }
#pragma omp parallel for num_threads(static_cast <int>(parts))
    for (std::size_t p = 0; p < parts; ++p) part(n * p / parts, n * (p + 1) / parts);
}

/// Calls part(begin, end) on blocks of [0, n) whose items hold `per_item` values each: about 2,048 values a
/// block (one item at least; a rounding of useful length that stays in cache), the blocks spread over the
/// threads from 4 a piece. For items that are independent, so the bits do not depend on the split.
template <class Part>
void split_blocks(std::size_t n, std::size_t per_item, Part part) {
    const std::size_t per_block = std::max<std::size_t>(1, 2048 / std::max<std::size_t>(per_item, 1)),
                      blocks = (n + per_block - 1) / per_block;
    split(blocks, 4, [&](std::size_t b0, std::size_t b1) {
        for (std::size_t b = b0; b < b1; ++b) part(b * per_block, std::min(n, (b + 1) * per_block));
    });
}

} // namespace mixprec::autodiff::detail
