// Prints the instruction-set levels mixprec may use here (portable up to MIXPREC_ISA's cap or the CPU's
// best), lowest first, on one line: scripts/test and tests/isa_reproducibility.sh run once per level.
// With --describe, prints instead which kernels run: mixprec's level, oneDNN's and OpenBLAS's choice.
#include <mixprec/mixprec.hpp>

#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>

#include <oneapi/dnnl/dnnl_types.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

std::string onednn_isa_name(unsigned isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41:
        return "sse41";
    case dnnl_cpu_isa_avx:
        return "avx";
    case dnnl_cpu_isa_avx2:
        return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
        return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
        return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
        return "avx512_core_amx";
    }
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%x", isa);
    return hex;
}

/// OpenBLAS's kernel family for this CPU (it picks one at load time from the CPU model).
std::string openblas_core() {
    using Corename = const char* (*)();
    const auto corename = reinterpret_cast<Corename>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    return corename ? corename() : "unknown";
}

} // namespace

int main(int argc, char** argv) {
    using namespace mixprec::autodiff;
    try {
        if (argc > 1 && std::strcmp(argv[1], "--describe") == 0) {
            std::printf("mixprec kernels %s (CPU best %s), oneDNN %s, OpenBLAS %s\n",
                        std::string(name_of(isa())).c_str(), std::string(name_of(cpu_isa())).c_str(),
                        onednn_isa_name(detail::onednn_effective_isa()).c_str(), openblas_core().c_str());
            return 0;
        }
        std::string line;
        for (Isa level : available_isas()) line += std::string(line.empty() ? "" : " ") + std::string(name_of(level));
        std::printf("%s\n", line.c_str());
        return 0;
    } catch (const isa_error& e) {
        std::fprintf(stderr, "isa_levels: %s\n", e.what());
        return 2;
    }
}
