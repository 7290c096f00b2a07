#include <mixprec/optim/near_underflow.hpp>

#include <mixprec/autodiff/tensor/detail/named_choice.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>

namespace mixprec::optim {
namespace {

namespace named = autodiff::detail;

constexpr named::name_table<NearUnderflow, 3> names{{{NearUnderflow::automatic, "automatic"},
                                                     {NearUnderflow::in_double, "double"},
                                                     {NearUnderflow::in_float, "float"}}};

std::atomic<NearUnderflow>& process_way() {
    return named::process_choice("MIXPREC_NEAR_UNDERFLOW", NearUnderflow::automatic, near_underflow_named);
}

/// Seconds of 8 independent chains of 512 multiplies by 0.999, from `start` (2^-140 stays subnormal
/// throughout, 1 stays normal). The operands pass through volatiles so that nothing is folded.
double multiplies(float start) {
    volatile float seed = start, factor = 0.999f;
    const float by = factor;
    float x[8];
    for (float& v : x) v = seed;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 512; ++i)
        for (float& v : x) v *= by;
    const auto t1 = std::chrono::steady_clock::now();
    float sum = 0.0f;
    for (float v : x) sum += v;
    seed = sum;
    return std::chrono::duration<double>(t1 - t0).count();
}

} // namespace

std::string_view name_of(NearUnderflow way) { return named::name_in(names, way); }

NearUnderflow near_underflow_named(std::string_view name) {
    return named::named_in(names, name, "way of taking lanes near underflow");
}

NearUnderflow near_underflow() { return process_way().load(std::memory_order_relaxed); }

void set_near_underflow(NearUnderflow way) { process_way().store(way, std::memory_order_relaxed); }

bool subnormal_floats_are_slow() {
    static const bool slow = [] {
        double normal = std::numeric_limits<double>::infinity(), subnormal = normal;
        for (int round = 0; round < 5; ++round) {
            normal = std::min(normal, multiplies(1.0f));
            subnormal = std::min(subnormal, multiplies(0x1p-140f));
        }
        return subnormal > 4.0 * normal;
    }();
    return slow;
}

bool near_underflow_in_double() {
    const NearUnderflow way = near_underflow();
    return way == NearUnderflow::in_double || (way == NearUnderflow::automatic && subnormal_floats_are_slow());
}

} // namespace mixprec::optim
