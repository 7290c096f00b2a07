#include <mixprec/autodiff/tensor/isa.hpp>

#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>

#if defined(MIXPREC_X86_KERNELS)
#include <cpuid.h>
#endif

#include <array>
#include <atomic>
#include <cstdlib>
#include <string>

namespace mixprec::autodiff {
namespace {

constexpr std::array levels{Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16};

bool cpu_has(Isa level) {
#if defined(MIXPREC_X86_KERNELS)
    // CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
    const auto f16c = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    };
    switch (level) {
    case Isa::portable:
        return true;
    case Isa::avx2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c();
    case Isa::avx512:
        return cpu_has(Isa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case Isa::avx512_bf16:
        return cpu_has(Isa::avx512) && __builtin_cpu_supports("avx512bf16");
    }
    return false;
#else
    return level == Isa::portable;
#endif
}

std::string level_list() {
    std::string list;
    for (Isa level : levels) list += std::string(name_of(level)) + ", ";
    return list + "native";
}

/// Read at first use; a bad value throws, and throws again at every later use.
const detail::IsaRequest& settings() {
    static const detail::IsaRequest request = detail::parse_isa_request(std::getenv("MIXPREC_ISA"), cpu_isa());
    return request;
}

std::atomic<Isa>& active() {
    static std::atomic<Isa> level{settings().cap};
    return level;
}

} // namespace

namespace detail {

IsaRequest parse_isa_request(const char* value, Isa cpu) {
    if (value == nullptr || *value == '\0' || std::string_view(value) == "native") return {cpu, false};
    for (Isa level : levels) {
        if (name_of(level) != value) continue;
        if (level > cpu)
            throw isa_error("MIXPREC_ISA=" + std::string(value) + " is above what this CPU has: its best level is " +
                            std::string(name_of(cpu)));
        return {level, true};
    }
    throw isa_error("MIXPREC_ISA=\"" + std::string(value) + "\" names no instruction-set level; use one of " +
                    level_list());
}

std::optional<Isa> requested_isa() {
    if (!settings().named) return std::nullopt;
    return settings().cap;
}

} // namespace detail

std::string_view name_of(Isa level) {
    switch (level) {
    case Isa::portable:
        return "portable";
    case Isa::avx2:
        return "avx2";
    case Isa::avx512:
        return "avx512";
    case Isa::avx512_bf16:
        return "avx512_bf16";
    }
    return "?";
}

Isa cpu_isa() {
    static const Isa best = [] {
        Isa b = Isa::portable;
        for (Isa level : levels)
            if (cpu_has(level)) b = level;
        return b;
    }();
    return best;
}

Isa max_isa() { return settings().cap; }

std::vector<Isa> available_isas() {
    std::vector<Isa> list;
    for (Isa level : levels)
        if (level <= max_isa()) list.push_back(level);
    return list;
}

Isa isa() { return active().load(std::memory_order_relaxed); }

void set_isa(Isa level) {
    if (name_of(level) == "?") throw isa_error("set_isa: " + std::to_string(int(level)) + " is not a level");
    if (level > max_isa())
        throw isa_error("set_isa(" + std::string(name_of(level)) + "): above the highest level available, " +
                        std::string(name_of(max_isa())) +
                        (detail::requested_isa() ? " (capped by MIXPREC_ISA)" : " (this CPU's best)"));
    active().store(level, std::memory_order_relaxed);
}

bool cpu_has_avx512_vbmi() {
#if defined(MIXPREC_X86_KERNELS)
    static const bool yes = __builtin_cpu_supports("avx512vbmi");
    return yes;
#else
    return false;
#endif
}

} // namespace mixprec::autodiff
