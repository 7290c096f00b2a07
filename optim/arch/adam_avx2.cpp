// Adam's update with AVX2 (compiled with -mavx2): AdamRule (optim/detail/adam_step.hpp) 8 lanes at a
// time, a block holding lanes near underflow in double when asked, with the same bits
// (optim/detail/near_underflow_avx2.hpp).

#include <mixprec/optim/detail/adam_step.hpp>
#include <mixprec/optim/detail/near_underflow_avx2.hpp>

namespace mixprec::optim::detail {

void adam_avx2(std::size_t n, const Arrays& a, const AdamCoefficients& k, bool in_double) {
    if (a.s[2])
        avx2::in_blocks(n, a, AdamRule<true>{k}, in_double);
    else
        avx2::in_blocks(n, a, AdamRule<false>{k}, in_double);
}

} // namespace mixprec::optim::detail
