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

/// in_pieces, except that from the avx512 level up kernel(begin, end) runs on each piece instead (an
/// AVX-512 kernel of optim/arch/ that keeps loop's bits).
template <class Loop, class Kernel>
void in_pieces(std::size_t n, Loop loop, Kernel kernel) {
#if defined(MIXPREC_X86_KERNELS)
    if (autodiff::isa() >= autodiff::Isa::avx512) {
        autodiff::detail::split(n, min_piece, kernel);
        return;
    }
#endif
    in_pieces(n, loop);
}

} // namespace mixprec::optim::detail
