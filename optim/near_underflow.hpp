#pragma once
// How the optimizers' elementwise updates (Adam, AdamW, SGD) take lanes whose state nears underflow: the
// m, v or momentum of a weight whose gradient stays zero decays into the subnormal numbers and stays there.
// Float arithmetic on subnormal numbers takes a microcode assist per instruction on many Intel cores (about
// 100 times a normal multiply), and none on others (AMD's Zen 4: the same time). From the avx2 level up the
// kernels can take such lanes through double with the same bits (optim/detail/lanes.hpp), which is a gain
// only where float arithmetic is slow there: elsewhere the plain float loop is 3-4 times faster on such
// lanes. Every choice gives the same bits; only the time differs.

#include <string_view>

namespace mixprec::optim {

enum class NearUnderflow {
    automatic, ///< in_double where subnormal_floats_are_slow() on this CPU, else in_float
    in_double, ///< lanes near underflow through double (the kernels of optim/arch/), from avx2 up
    in_float,  ///< every lane in float, as the portable level computes them
};

/// "automatic", "double" or "float".
std::string_view name_of(NearUnderflow way);
/// The way of that name; std::invalid_argument naming the choices for any other.
NearUnderflow near_underflow_named(std::string_view name);
/// This process's way: at first MIXPREC_NEAR_UNDERFLOW's when that is set, else automatic.
/// set_near_underflow changes it (for every thread; no update may run meanwhile).
NearUnderflow near_underflow();
void set_near_underflow(NearUnderflow way);

/// Whether a float multiply that yields a subnormal number takes more than 4 times as long as one of
/// normal numbers on this CPU: measured once per process (chains of multiplies, best of 5; about 0.1 ms
/// where it is slow).
bool subnormal_floats_are_slow();

/// Whether an update takes its lanes near underflow through double: near_underflow(), automatic resolved.
bool near_underflow_in_double();

} // namespace mixprec::optim
