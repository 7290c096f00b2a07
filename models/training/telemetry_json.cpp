#include <mixprec/models/training/telemetry_json.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace mixprec::models {
namespace {

/// float32's 9 significant digits, as a double that prints as them.
double nine_digits(float value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", double(value));
    return std::stod(text);
}

nlohmann::ordered_json histogram_json(const std::vector<std::uint64_t>& bins) {
    std::size_t first = 1, last = 254; // float32's normal exponents
    while (first <= last && bins[first] == 0) ++first;
    while (last >= first && bins[last] == 0) --last;
    nlohmann::ordered_json counts = nlohmann::ordered_json::array();
    for (std::size_t i = first; i <= last; ++i) counts.push_back(bins[i]);
    return {{"min", first <= last ? int(first) - 127 : 0}, {"counts", std::move(counts)}};
}

} // namespace

std::string telemetry_json(const amp::Telemetry& telemetry) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& [name, s] : telemetry.entries()) {
        nlohmann::ordered_json entry = {{"count", s.count},           {"zeros", s.zeros},
                                        {"underflow", s.underflow},   {"subnormal", s.subnormal},
                                        {"overflow", s.overflow},     {"nonfinite", s.nonfinite},
                                        {"amax", nine_digits(s.amax)}};
        if (s.exponent_histogram.size() == autodiff::RoundingStats::histogram_bins)
            entry["log2"] = histogram_json(s.exponent_histogram);
        out[name] = std::move(entry);
    }
    return out.dump();
}

} // namespace mixprec::models
