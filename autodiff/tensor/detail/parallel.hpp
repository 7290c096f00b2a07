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

} // namespace mixprec::autodiff::detail
