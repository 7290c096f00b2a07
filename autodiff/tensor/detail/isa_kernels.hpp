#pragma once
// Internal: loops compiled once per vector width and run at the width of the level in use (isa.hpp).
//
//   Tensor map_tanh(const Tensor& x) {
//       return detail::vectorized([&] { return map(x, [](float v) { return detail::tanh(v); }); });
//   }
// compiles the lambda's body three times — for AVX-512, for AVX2 and for the x86-64 baseline — and calls
// the one that isa() allows. `flatten` inlines everything the body calls into each copy, so its loops use
// that copy's vectors. Each copy must round as the others do: compile the TU with -ffp-contract=off (no
// FMA contraction), so that every level gives the same bits. This replaces GCC's target_clones, whose
// choice is made once when the library loads and cannot follow MIXPREC_ISA or set_isa.

#include <mixprec/autodiff/tensor/isa.hpp>

#include <optional>

namespace mixprec::autodiff::detail {

/// What a value of MIXPREC_ISA asks for on a CPU whose best level is `cpu`: the cap, and whether the
/// value named a level (then oneDNN is capped to match). null, "" and "native" ask for `cpu`. Throws
/// isa_error for a value that names no level or a level above `cpu`.
struct IsaRequest {
    Isa cap;
    bool named;
};
IsaRequest parse_isa_request(const char* value, Isa cpu);

/// The level MIXPREC_ISA named, if it named one (not `native`, not unset).
std::optional<Isa> requested_isa();

#if defined(__x86_64__)
template <class F>
[[gnu::target("avx512f"), gnu::flatten]] inline decltype(auto) run_avx512(F& body) {
    return body();
}
template <class F>
[[gnu::target("avx2"), gnu::flatten]] inline decltype(auto) run_avx2(F& body) {
    return body();
}
#endif
template <class F>
[[gnu::flatten]] inline decltype(auto) run_baseline(F& body) {
    return body();
}

/// body(), from the copy compiled for the widest vectors the level in use allows.
template <class F>
decltype(auto) vectorized(F&& body) {
#if defined(__x86_64__)
    const Isa level = isa();
    if (level >= Isa::avx512) return run_avx512(body);
    if (level >= Isa::avx2) return run_avx2(body);
#endif
    return run_baseline(body);
}

} // namespace mixprec::autodiff::detail
