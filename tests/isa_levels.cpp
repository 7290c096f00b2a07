// Prints the instruction-set levels mixprec may use here (portable up to MIXPREC_ISA's cap or the CPU's
// best), lowest first, on one line: scripts/test and tests/isa_reproducibility.sh run once per level.
#include <mixprec/mixprec.hpp>

#include <cstdio>
#include <string>

int main() {
    using namespace mixprec::autodiff;
    try {
        std::string line;
        for (Isa level : available_isas()) line += std::string(line.empty() ? "" : " ") + std::string(name_of(level));
        std::printf("%s\n", line.c_str());
        return 0;
    } catch (const isa_error& e) {
        std::fprintf(stderr, "isa_levels: %s\n", e.what());
        return 2;
    }
}
