#pragma once
// What both conformance replays read from the golden files: LossScaleOptions by field name, float32
// values written as C99 hex floats, numbers printed for a message.

#include <mixprec/amp/loss_scale.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace conformance {

/// Sets the LossScaleOptions field `name` (as harness.py and optimizer_cases.py spell them) to `v`.
inline void set_option(mixprec::amp::LossScaleOptions& o, const std::string& name, const nlohmann::json& v) {
    using mixprec::amp::AtMinScale;
    if (name == "initial_scale")
        o.initial_scale = v.get<float>();
    else if (name == "growth_interval")
        o.growth_interval = v.get<std::int64_t>();
    else if (name == "growth_factor")
        o.growth_factor = v.get<double>();
    else if (name == "backoff_factor")
        o.backoff_factor = v.get<double>();
    else if (name == "hysteresis")
        o.hysteresis = v.get<std::int64_t>();
    else if (name == "consecutive_hysteresis")
        o.consecutive_hysteresis = v.get<bool>();
    else if (name == "min_scale")
        o.min_scale = v.get<float>();
    else if (name == "max_scale")
        o.max_scale = v.get<float>();
    else if (name == "overflow_tolerance")
        o.overflow_tolerance = v.get<double>();
    else if (name == "decrease_every")
        o.decrease_every = v.get<std::int64_t>();
    else if (name == "at_min_scale" && v == "raise")
        o.at_min_scale = AtMinScale::raise;
    else if (name == "at_min_scale" && v == "keep_going")
        o.at_min_scale = AtMinScale::keep_going;
    else
        throw std::runtime_error("unknown loss scale option " + name + " = " + v.dump());
}

/// Every field of `options` (a JSON object) set on `o`.
inline void set_options(mixprec::amp::LossScaleOptions& o, const nlohmann::json& options) {
    for (const auto& [name, v] : options.items()) set_option(o, name, v);
}

/// A number written by Python: a decimal integer or a C99 hex float ("inf", "nan" included).
inline double parse_number(const std::string& text) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0') throw std::runtime_error("not a number: '" + text + "'");
    return v;
}

/// A float32 written as a hex float; refuses one that is not a float32.
inline float parse_float32(const std::string& text) {
    const double v = parse_number(text);
    const float f = static_cast<float>(v);
    if (!(f == v) && !(v != v)) throw std::runtime_error("not a float32: '" + text + "'");
    return f;
}

inline std::vector<float> parse_floats(const nlohmann::json& list) {
    std::vector<float> out;
    for (const auto& v : list) out.push_back(parse_float32(v.get<std::string>()));
    return out;
}

/// 9 significant digits: enough to tell two float32 apart.
inline std::string number(double v) {
    char text[64];
    std::snprintf(text, sizeof text, "%.9g", v);
    return text;
}

/// A replay's command line: `program <golden dir> [--verbose]`.
struct Arguments {
    std::vector<std::filesystem::path> files; ///< the directory's *.jsonl, sorted
    bool verbose = false;
};

/// The arguments, or nothing after a message on stderr (no directory, or no golden file in it).
inline std::optional<Arguments> parse_arguments(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << "usage: " << argv[0] << " <golden dir> [--verbose]\n";
        return std::nullopt;
    }
    Arguments a;
    a.verbose = argc > 2 && std::string(argv[2]) == "--verbose";
    for (const auto& e : std::filesystem::directory_iterator(argv[1]))
        if (e.path().extension() == ".jsonl") a.files.push_back(e.path());
    std::sort(a.files.begin(), a.files.end());
    if (a.files.empty()) {
        std::cerr << "no golden files (*.jsonl) in " << argv[1] << "\n";
        return std::nullopt;
    }
    return a;
}

} // namespace conformance
