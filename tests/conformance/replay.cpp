// Replays every golden file of tests/golden/loss_scale (recorded from the libraries themselves by
// tests/conformance/record.py) through mixprec's LossScale and compares, step by step, every value the
// library exposed: the scale bit for bit, the counters exactly, the skip decisions. Prints the conformance
// table of the README; exits 1 if any value differs in a way that is not the guard (the scale kept finite
// and ≥ 2^-126) or a difference documented in amp/loss_scale.hpp (listed in `documented` below, each of
// which must still show, so the documentation stays true).
//
//   conformance_replay <golden dir> [--verbose]

#include "golden.hpp"

#include <mixprec/amp/loss_scale.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using conformance::number;
using mixprec::amp::LossScale;
using mixprec::amp::LossScaleOptions;
using mixprec::amp::LossScaleState;
using nlohmann::json;

/// A known difference, documented in amp/loss_scale.hpp and the README: in the golden file `golden`
/// (its name without .jsonl), `value` differs from mixprec's in some cases. When the difference is in
/// the scale, the sequences part there and the case is compared no further (`diverges`).
struct Documented {
    const char* golden;
    const char* value;
    bool diverges;
    const char* why;
};
constexpr Documented documented[] = {
    {"tf_keras", "optimizer_iterations", false,
     "tf.keras advances the optimizer's iterations on a skipped step; mixprec (as Keras 3) does not"},
    {"deepspeed_0.17.0", "scale", true,
     "DeepSpeed before 0.17.1 grows on the N-th clean step after an overflow, not the (N+1)-th"},
    {"mindspore_manager", "scale", true,
     "MindSpore's DynamicLossScaleManager keeps its scale as a Python number (float64), not float32"},
};

const Documented* find_documented(const std::string& golden, const std::string& value) {
    for (const Documented& d : documented)
        if (golden == d.golden && value == d.value) return &d;
    return nullptr;
}

/// The run-length code of harness.py: one character per step.
std::vector<double> decode(const json& entry) {
    const std::string code = entry.at("code").get<std::string>();
    const std::vector<std::string> values = entry.at("values").get<std::vector<std::string>>();
    std::vector<double> out;
    std::size_t next = 0;
    double previous = 0;
    for (char c : code) {
        double v = 0;
        switch (c) {
        case '=':
            v = previous;
            break;
        case '+':
            v = previous + 1;
            break;
        case '-':
            v = previous - 1;
            break;
        case '0':
            v = 0;
            break;
        case '#':
            if (next == values.size()) throw std::runtime_error("more '#' than values");
            v = conformance::parse_number(values[next++]);
            break;
        default:
            throw std::runtime_error(std::string("unknown code character '") + c + "'");
        }
        out.push_back(v);
        previous = v;
    }
    if (next != values.size()) throw std::runtime_error("values left over");
    return out;
}

/// mixprec's counterpart of each value a library exposes, after step i.
struct Mixprec {
    const LossScaleState& s;
    std::int64_t finite_steps, overflow_steps;
    double value(const std::string& name) const {
        if (name == "scale") return s.scale;
        if (name == "unclamped_scale") return s.unclamped_scale;
        if (name == "growth_counter") return double(s.growth_counter);
        if (name == "hysteresis_left") return double(s.hysteresis_left);
        if (name == "overflows_counted") return double(s.overflows_counted);
        if (name == "iteration") return double(s.iteration);
        if (name == "last_overflow") return double(s.last_overflow);
        if (name == "growths") return double(s.growths);
        if (name == "backoffs") return double(s.backoffs);
        // LossScaleOptimizer applies exactly the finite steps (test_loss_scale_optimizer checks that) and
        // advances its inner optimizer's iterations only then.
        if (name == "applied_steps" || name == "optimizer_iterations") return double(finite_steps);
        if (name == "skipped_steps") return double(overflow_steps);
        // MindSpore's counters (the mindspore rule keeps them 0-based).
        if (name == "next_iteration") return double(s.iteration + 1);
        if (name == "last_rescale_iteration") return double(s.last_overflow + 1);
        if (name == "consecutive_overflows") return double(s.overflows_counted);
        throw std::runtime_error("no mixprec value for '" + name + "'");
    }
};

/// The scale left float32's normal range: where mixprec's guard acts and the library does not.
bool outside_guard(double library_scale) {
    return !std::isfinite(library_scale) || library_scale < 0x1p-126 ||
           library_scale > double(std::numeric_limits<float>::max());
}

struct FileResult {
    std::string golden, library, version, preset;
    std::size_t cases = 0, steps = 0, compared = 0, guard_cases = 0, failures = 0;
    std::map<std::string, std::size_t> documented_seen; // value → cases where the documented difference shows
};

FileResult replay(const std::filesystem::path& path, bool verbose) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line)) throw std::runtime_error(path.string() + ": empty");
    const json header = json::parse(line);
    FileResult r;
    r.golden = path.stem().string();
    r.library = header.at("library");
    r.version = header.at("version");
    r.preset = header.at("preset");
    // The preset for the library's half dtype where the header names one (Cerebras' defaults depend on it).
    LossScaleOptions preset =
        header.contains("half_dtype")
            ? mixprec::amp::loss_scale_preset(
                  r.preset, mixprec::autodiff::parse_dtype(header.at("half_dtype").get<std::string>()))
            : mixprec::amp::loss_scale_preset(r.preset);
    if (header.contains("options")) // the library's defaults, where they are not the preset's
        conformance::set_options(preset, header.at("options"));
    for (const auto& [value, getter] : header.at("values").items())
        if (const Documented* d = find_documented(r.golden, value)) r.documented_seen[d->value] = 0;

    while (std::getline(in, line)) {
        const json c = json::parse(line);
        const std::string name = c.at("case");
        LossScaleOptions options = preset;
        conformance::set_options(options, c.at("options"));
        // MindSpore has one factor (growth ×f, backoff ÷f): its cases give it as growth_factor.
        if (options.rule == mixprec::amp::ScaleRule::mindspore && !c.at("options").contains("backoff_factor"))
            options.backoff_factor = 1 / options.growth_factor;
        const std::string finite = c.at("finite");
        const bool raised = c.contains("raised"); // the library raised at the last step
        std::map<std::string, std::vector<double>> expected;
        for (const auto& [key, v] : c.items())
            if (v.is_object() && key != "options") expected[key] = decode(v);
        for (const auto& [key, seq] : expected)
            if (seq.size() + raised != finite.size())
                throw std::runtime_error(path.string() + ": " + name + "/" + key + " length");

        LossScale scale(options);
        std::int64_t finite_steps = 0, overflow_steps = 0;
        std::map<std::string, bool> differs; // values already found to differ (documented ones)
        std::string failure;
        bool diverged = false;
        std::size_t i = 0;
        for (; i < finite.size() && failure.empty() && !diverged; ++i) {
            const bool ok = finite[i] == '1';
            if (raised && i + 1 == finite.size()) {
                try {
                    scale.update(ok);
                    failure = "step " + std::to_string(i + 1) + " raised in " + r.library + " (" +
                              c.at("raised").get<std::string>() + "), not in mixprec";
                } catch (const mixprec::amp::loss_scale_error&) {}
                break;
            }
            scale.update(ok);
            (ok ? finite_steps : overflow_steps) += 1;
            const Mixprec ours{scale.state(), finite_steps, overflow_steps};
            if (expected.count("scale") && outside_guard(expected["scale"][i])) {
                if (!(std::isfinite(scale.scale()) && scale.scale() >= 0x1p-126f))
                    failure = "the guard did not hold at step " + std::to_string(i + 1);
                ++r.guard_cases;
                if (verbose)
                    std::cout << "  " << r.library << " " << name << ": the guard acts at step " << i + 1
                              << " (library scale " << number(expected["scale"][i]) << ", mixprec "
                              << number(scale.scale()) << "); compared up to there\n";
                break;
            }
            // Every value that differs after this step: a documented difference in the scale ends the
            // comparison (the sequences part there); a documented one elsewhere is noted and the rest goes
            // on; any other is a failure.
            std::vector<std::string> differing;
            for (const auto& [key, seq] : expected)
                if (!differs[key] && seq[i] != ours.value(key)) differing.push_back(key);
            if (differing.empty()) continue;
            const auto diverging = std::find_if(differing.begin(), differing.end(), [&](const std::string& key) {
                const Documented* d = find_documented(r.golden, key);
                return d && d->diverges;
            });
            for (const std::string& key : differing) {
                const bool is_documented = find_documented(r.golden, key) != nullptr;
                if (diverging != differing.end() && key != *diverging) continue;
                std::ostringstream why;
                why << name << ": " << key << " after step " << i + 1 << " is " << number(expected[key][i]) << " in "
                    << r.library << ", " << number(ours.value(key)) << " in mixprec (steps "
                    << finite.substr(i >= 12 ? i - 11 : 0, i >= 12 ? 12 : i + 1) << " up to there)";
                if (!is_documented) {
                    failure = why.str();
                    break;
                }
                differs[key] = true;
                ++r.documented_seen[key];
                if (verbose) std::cout << "  documented: " << why.str() << "\n";
            }
            diverged = diverging != differing.end();
        }
        r.steps += finite.size();
        r.compared += i;
        ++r.cases;
        if (!failure.empty()) {
            ++r.failures;
            std::cout << "DIFFERS " << r.library << " " << r.version << " (preset " << r.preset << ") " << failure
                      << "\n";
        }
    }
    return r;
}

} // namespace

int main(int argc, char** argv) {
    const std::optional<conformance::Arguments> args = conformance::parse_arguments(argc, argv);
    if (!args) return 2;
    std::vector<FileResult> results;
    bool ok = true;
    for (const auto& f : args->files) {
        try {
            results.push_back(replay(f, args->verbose));
        } catch (const std::exception& e) {
            std::cout << "ERROR " << f.string() << ": " << e.what() << "\n";
            ok = false;
        }
    }
    std::cout << "\n| golden file | library | version | preset | cases | steps compared | result |\n"
                 "|---|---|---|---|---:|---:|---|\n";
    for (const FileResult& r : results) {
        std::string result = r.failures ? std::to_string(r.failures) + " cases differ" : "identical";
        if (r.guard_cases) result += "; the guard acts in " + std::to_string(r.guard_cases) + " (compared up to there)";
        for (const auto& [value, seen] : r.documented_seen) {
            result += "; except " + value + " (a documented difference) in " + std::to_string(seen) + " cases";
            if (seen == 0) {
                result += " (documented but not seen: FAIL)";
                ok = false;
            }
        }
        ok = ok && r.failures == 0;
        std::cout << "| " << r.golden << " | " << r.library << " | " << r.version << " | " << r.preset << " | "
                  << r.cases << " | " << r.compared << " of " << r.steps << " | " << result << " |\n";
    }
    return ok ? 0 : 1;
}
