#include "convert.hpp"

#include "convert_kernels.hpp"

#if defined(MIXPREC_X86_KERNELS)
#include <cpuid.h>
#endif

#include <atomic>
#include <stdexcept>
#include <string>

namespace mixprec::autodiff {
namespace detail {

const convert_kernels& portable_kernels() {
    static constexpr convert_kernels table = generic_kernels();
    return table;
}

} // namespace detail

namespace {

#if defined(MIXPREC_X86_KERNELS)
/// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
bool cpu_has_f16c() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

bool cpu_has(SimdPath path) {
#if defined(MIXPREC_X86_KERNELS)
    switch (path) {
    case SimdPath::portable: return true;
    case SimdPath::avx2:
        return __builtin_cpu_supports("avx2") && cpu_has_f16c() && __builtin_cpu_supports("fma");
    case SimdPath::avx512:
        return cpu_has(SimdPath::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    }
    return false;
#else
    return path == SimdPath::portable;
#endif
}

const detail::convert_kernels& kernels_for(SimdPath path) {
#if defined(MIXPREC_X86_KERNELS)
    if (path == SimdPath::avx512) return detail::avx512_kernels();
    if (path == SimdPath::avx2) return detail::avx2_kernels();
#endif
    return detail::portable_kernels();
}

SimdPath best_path() {
    auto paths = available_simd_paths();
    return paths.back();
}

std::atomic<SimdPath>& active_path() {
    static std::atomic<SimdPath> path{best_path()};
    return path;
}

void check_count(const void* src, const void* dst, std::size_t n) {
    if (n != 0 && (src == nullptr || dst == nullptr))
        throw std::invalid_argument("mixprec conversion: null buffer for " + std::to_string(n) + " elements");
}

} // namespace

std::string_view name_of(SimdPath path) {
    switch (path) {
    case SimdPath::portable: return "portable";
    case SimdPath::avx2: return "avx2";
    case SimdPath::avx512: return "avx512";
    }
    return "?";
}

std::vector<SimdPath> available_simd_paths() {
    std::vector<SimdPath> paths;
    for (auto p : {SimdPath::portable, SimdPath::avx2, SimdPath::avx512})
        if (cpu_has(p)) paths.push_back(p);
    return paths;
}

SimdPath simd_path() { return active_path().load(std::memory_order_relaxed); }

void set_simd_path(SimdPath path) {
    if (!cpu_has(path))
        throw std::invalid_argument("this CPU cannot run the " + std::string(name_of(path)) + " conversion path");
    active_path().store(path, std::memory_order_relaxed);
}

bool has_avx512_bf16() {
#if defined(MIXPREC_X86_KERNELS)
    return cpu_has(SimdPath::avx512) && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

void narrow(const float* src, void* dst, std::size_t n, Dtype to, Overflow overflow) {
    check_count(src, dst, n);
    if (n == 0) return;
    const auto& k = kernels_for(simd_path());
    const auto i = static_cast<std::size_t>(to);
    (overflow == Overflow::saturate ? k.narrow_saturate[i] : k.narrow[i])(src, dst, n);
}

void widen(const void* src, Dtype from, float* dst, std::size_t n) {
    check_count(src, dst, n);
    if (n == 0) return;
    kernels_for(simd_path()).widen[static_cast<std::size_t>(from)](src, dst, n);
}

} // namespace mixprec::autodiff
