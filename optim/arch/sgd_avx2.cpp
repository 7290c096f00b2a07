// SGD's update with AVX2 (compiled with -mavx2): SgdRule (optim/detail/sgd_step.hpp) 8 lanes at a time, a
// block holding lanes near underflow in double when asked, with the same bits (optim/detail/near_underflow_avx2.hpp).

#include <mixprec/optim/detail/near_underflow_avx2.hpp>
#include <mixprec/optim/detail/sgd_step.hpp>

namespace mixprec::optim::detail {

void sgd_avx2(std::size_t n, const Arrays& a, const SgdCoefficients& k, bool in_double) {
    if (a.s[0])
        avx2::in_blocks(n, a, SgdRule<true>{k}, in_double);
    else
        avx2::in_blocks(n, a, SgdRule<false>{k}, in_double);
}

} // namespace mixprec::optim::detail
