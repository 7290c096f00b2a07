// SGD's update with AVX-512 (compiled with -mavx512f, -mavx512bw, -mavx512vl, -mavx512dq): SgdRule
// (optim/detail/sgd_step.hpp) 16 lanes at a time, the lanes near underflow in double when asked, with the same bits
// (optim/detail/near_underflow_avx512.hpp).

#include <mixprec/optim/detail/near_underflow_avx512.hpp>
#include <mixprec/optim/detail/sgd_step.hpp>

namespace mixprec::optim::detail {

void sgd_avx512(std::size_t n, const Arrays& a, const SgdCoefficients& k, bool in_double) {
    if (a.s[0])
        avx512::in_blocks(n, a, SgdRule<true>{k}, in_double);
    else
        avx512::in_blocks(n, a, SgdRule<false>{k}, in_double);
}

} // namespace mixprec::optim::detail
