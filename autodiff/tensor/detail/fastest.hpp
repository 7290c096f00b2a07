#pragma once
// Internal: the measured modes' choices (measured.cpp), and run_fastest, which makes one.

#include <mixprec/autodiff/tensor/rounding.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mixprec::autodiff::detail {

/// The candidate chosen or adopted for `key` (its position among `names`), if there is one among them.
std::optional<std::size_t> measured_choice(const std::string& key, const std::vector<std::string_view>& names);
/// Records names[choice] for `key` with its report `line`, unless another thread recorded one of `names`
/// first; returns the position of the choice recorded.
std::size_t record_measured_choice(const std::string& key, const std::vector<std::string_view>& names,
                                   std::size_t choice, std::string line);

/// run(i) for the candidate chosen or adopted for `key`. At the first call without one among `names`:
/// each candidate once untimed (first touches, oneDNN's JIT) and three times timed, interleaved so that a
/// slow moment of the machine hits them all, with the rounding telemetry paused; then the fastest is
/// recorded, with a line naming every candidate's best time, and run once more for its result (whose
/// roundings count, once).
template <class Run>
auto run_fastest(const std::string& key, const std::vector<std::string_view>& names, Run run) {
    if (const auto chosen = measured_choice(key, names)) return run(*chosen);
    std::vector<double> best(names.size(), std::numeric_limits<double>::infinity());
    {
        const RoundingPause pause;
        for (std::size_t i = 0; i < names.size(); ++i) run(i);
        for (int repeat = 0; repeat < 3; ++repeat)
            for (std::size_t i = 0; i < names.size(); ++i) {
                const auto start = std::chrono::steady_clock::now();
                run(i);
                const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
                best[i] = std::min(best[i], took.count());
            }
    }
    const auto win = static_cast<std::size_t>(std::min_element(best.begin(), best.end()) - best.begin());
    std::string line = key + ": " + std::string(names[win]) + ", best of 3:";
    for (std::size_t i = 0; i < names.size(); ++i) {
        std::array<char, 32> ms{};
        std::snprintf(ms.data(), ms.size(), " %.3g ms", best[i]);
        line += (i ? ", " : " ") + std::string(names[i]) + ms.data();
    }
    return run(record_measured_choice(key, names, win, std::move(line))); // another thread may have chosen first
}

} // namespace mixprec::autodiff::detail
