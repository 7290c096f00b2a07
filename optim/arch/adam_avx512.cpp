// Adam's update with AVX-512 (compiled with -mavx512f, -mavx512bw, -mavx512vl, -mavx512dq): AdamRule
// (optim/detail/adam_step.hpp) 16 lanes at a time, the lanes near underflow in double when asked, with the same bits
// (optim/detail/near_underflow_avx512.hpp).

#include <mixprec/optim/detail/adam_step.hpp>
#include <mixprec/optim/detail/near_underflow_avx512.hpp>

namespace mixprec::optim::detail {

void adam_avx512(std::size_t n, const Arrays& a, const AdamCoefficients& k, bool in_double) {
    if (a.s[2])
        avx512::in_blocks(n, a, AdamRule<true>{k}, in_double);
    else
        avx512::in_blocks(n, a, AdamRule<false>{k}, in_double);
}

} // namespace mixprec::optim::detail
