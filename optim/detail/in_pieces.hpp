#pragma once
// Internal: an optimizer's elementwise update spread over the threads. Include only from .cpp files.

#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>

#include <cstddef>

namespace mixprec::optim::detail {

/// Elements per thread at least (128 KiB of weights): smaller variables are updated on one thread.
constexpr std::size_t min_piece = std::size_t{1} << 15;

/// loop(begin, end) over pieces of [0, n), one per thread, each at the vector width of the level in use.
/// For elementwise updates only, whose bits do not depend on where the pieces begin.
template <class Loop>
void in_pieces(std::size_t n, Loop loop) {
    autodiff::detail::split(n, min_piece, [&](std::size_t begin, std::size_t end) {
        autodiff::detail::vectorized([&] { loop(begin, end); });
    });
}

/// in_pieces, except that each piece runs avx512(begin, end) from the avx512 level up and avx2(begin,
/// end) at the avx2 level: kernels of optim/arch/ that keep loop's bits.
template <class Loop, class Avx2, class Avx512>
void in_pieces(std::size_t n, Loop loop, Avx2 avx2, Avx512 avx512) {
#if defined(MIXPREC_X86_KERNELS)
    const autodiff::Isa level = autodiff::isa();
    if (level >= autodiff::Isa::avx512) return autodiff::detail::split(n, min_piece, avx512);
    if (level >= autodiff::Isa::avx2) return autodiff::detail::split(n, min_piece, avx2);
#endif
    in_pieces(n, loop);
}

} // namespace mixprec::optim::detail
