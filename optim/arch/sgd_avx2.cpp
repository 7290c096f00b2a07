// SGD's update with AVX2 (compiled with -mavx2): SgdRule (optim/detail/sgd_step.hpp) 8 lanes at a time, a
// block holding lanes near underflow in double with the same bits (optim/detail/near_underflow_avx2.hpp).

#include <mixprec/optim/detail/near_underflow_avx2.hpp>
#include <mixprec/optim/detail/sgd_step.hpp>

namespace mixprec::optim::detail {

void sgd_avx2(std::size_t n, const Arrays& a, const SgdCoefficients& k) {
    if (a.s[0])
        avx2::in_blocks(n, a, SgdRule<true>{k});
    else
        avx2::in_blocks(n, a, SgdRule<false>{k});
}

} // namespace mixprec::optim::detail
