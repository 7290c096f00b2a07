#pragma once
// Internal: an optimizer's elementwise update spread over the threads. Include only from .cpp files.

#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/optim/detail/lanes.hpp>
#include <mixprec/optim/near_underflow.hpp>

#include <cstddef>

namespace mixprec::optim::detail {

/// Elements per thread at least (128 KiB of weights): smaller variables are updated on one thread.
constexpr std::size_t min_piece = std::size_t{1} << 15;

/// An update of a's first n elements in pieces, one per thread, each piece given as (count, its arrays,
/// whether lanes near underflow go through double: near_underflow_in_double()) to the kernel of
/// optim/arch/ for the level in use — avx512 from the avx512 level up, avx2 at avx2 — or else as (count,
/// its arrays) to loop, run at the vector width of the level. The kernels keep loop's bits either way. For
/// elementwise updates only, whose bits do not depend on where the pieces begin.
template <class Loop, class Avx2, class Avx512>
void in_pieces(std::size_t n, const Arrays& a, Loop loop, Avx2 avx2, Avx512 avx512) {
    const auto run = [&](auto piece) {
        autodiff::detail::split(n, min_piece, [&](std::size_t lo, std::size_t hi) { piece(hi - lo, part_of(a, lo)); });
    };
#if defined(MIXPREC_X86_KERNELS)
    const autodiff::Isa level = autodiff::isa();
    if (level >= autodiff::Isa::avx2) { // only the kernels have a double path to choose (or measure) at all
        const bool in_double = near_underflow_in_double();
        if (level >= autodiff::Isa::avx512)
            return run([&](std::size_t count, const Arrays& part) { avx512(count, part, in_double); });
        return run([&](std::size_t count, const Arrays& part) { avx2(count, part, in_double); });
    }
#endif
    run([&](std::size_t count, const Arrays& part) { autodiff::detail::vectorized([&] { loop(count, part); }); });
}

} // namespace mixprec::optim::detail
