// Replays tests/golden/loss_scale_optimizer/*.jsonl (recorded by tests/conformance/record_optimizer.py
// from a library's own loss-scaled optimizer step) through amp::LossScaleOptimizer around optim::SGD,
// Adam or AdamW: the same scaled gradients in, and after every step the same skip decision, iteration
// count, scale and growth counter exactly, and the same weights and slots bit for bit or, where the
// library rounds in another order, within a bound derived from the arithmetic of that one step (each step
// starts from the library's recorded state, so differences cannot pile up unseen). Prints one table row
// per file; exits 1 on any difference beyond that.
//
//   conformance_replay_optimizer <golden dir> [--verbose]

#include "golden.hpp"

#include "error_bounds.hpp"

#include <mixprec/mixprec.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace mixprec;
using conformance::number;
using conformance::parse_floats;
using nlohmann::json;

std::unique_ptr<optim::Optimizer> inner_optimizer(const json& o) {
    const std::string kind = o.at("kind");
    const float lr = o.at("learning_rate").get<float>();
    optim::Clipping clip;
    if (o.contains("clip_global_norm")) clip.global_clipnorm = o.at("clip_global_norm").get<float>();
    if (kind == "sgd")
        return std::make_unique<optim::SGD>(optim::SGD::Options{.learning_rate = lr,
                                                                .momentum = o.value("momentum", 0.0f),
                                                                .nesterov = o.value("nesterov", false),
                                                                .weight_decay = o.value("weight_decay", 0.0f),
                                                                .clip = clip});
    const double beta1 = o.at("beta1"), beta2 = o.at("beta2");
    const float epsilon = o.at("epsilon");
    if (kind == "adam")
        return std::make_unique<optim::Adam>(optim::Adam::Options{
            .learning_rate = lr, .beta1 = beta1, .beta2 = beta2, .epsilon = epsilon, .clip = clip});
    if (kind == "adamw")
        return std::make_unique<optim::AdamW>(optim::AdamW::Options{.learning_rate = lr,
                                                                    .beta1 = beta1,
                                                                    .beta2 = beta2,
                                                                    .epsilon = epsilon,
                                                                    .clip = clip,
                                                                    .weight_decay = o.at("weight_decay")});
    throw std::runtime_error("unknown optimizer kind '" + kind + "'");
}

autodiff::Tensor float32_tensor(const std::vector<float>& v) {
    return autodiff::Tensor::from_floats(autodiff::Shape{v.size()}, v, autodiff::Dtype::float32);
}

/// Distance in float32 steps (0: the same bits; NaN equals NaN).
std::int64_t ulps(float a, float b) {
    if (std::isnan(a) && std::isnan(b)) return 0;
    const auto key = [](float f) {
        const auto i = std::bit_cast<std::int32_t>(f);
        return i < 0 ? std::int64_t{std::numeric_limits<std::int32_t>::min()} - i : std::int64_t{i};
    };
    return std::abs(key(a) - key(b));
}

struct Replay {
    std::string library, version;
    std::size_t cases = 0, steps = 0, failures = 0;
    std::size_t compared = 0, identical = 0; // float32 values compared; of which the same bits
    std::int64_t largest_ulps = 0;
    double largest_share = 0; // the largest difference as a share of its bound
};

constexpr double u = 0x1p-24; // float32's unit roundoff
using error_bounds::gamma32;  // γ_k = k·u / (1 − k·u): the relative error bound of k roundings

/// What one element of one step may differ by between two implementations of the same update that round
/// in a different order (the derivation is in tests/conformance/README.md). Both start from the same state
/// (the library's, recorded after the previous step) and the same unscaled gradient; each evaluates a sum
/// of products T with at most k roundings, so each lies within γ_k·Σ|terms| of the exact value and the
/// two within twice that.
struct Bounds {
    double weight = 0, slot0 = 0, slot1 = 0;
};

/// `dg` is what the gradient itself may differ by before the update (clipping: see clipped_gradients).
Bounds sgd_bounds(const json& o, double w, double b, double g, double dg, bool first) {
    const double lr = o.at("learning_rate"), mu = o.value("momentum", 0.0), wd = o.value("weight_decay", 0.0);
    const double gd = std::abs(g) + wd * std::abs(w); // the decayed gradient's terms
    if (mu == 0) return {2 * gamma32(5) * (std::abs(w) + lr * gd) + lr * dg};
    const double tb = first ? gd : mu * std::abs(b) + gd; // the new momentum buffer's terms
    const bool nesterov = o.value("nesterov", false);
    const double tw = std::abs(w) + lr * (nesterov ? gd + mu * tb : tb);
    return {2 * gamma32(8) * tw + lr * dg * (nesterov ? 1 + mu : 1), 2 * gamma32(5) * tb + dg};
}

Bounds adam_bounds(const json& o, double w, double m, double v, double g, double dg, double m1, double v1,
                   std::int64_t t) {
    const double lr = o.at("learning_rate"), b1 = o.at("beta1"), b2 = o.at("beta2"), eps = o.at("epsilon");
    const double wd = o.value("weight_decay", 0.0);
    const double tm = b1 * std::abs(m) + (1 - b1) * std::abs(g), tv = b2 * v + (1 - b2) * g * g;
    const double step_size = lr / (1 - std::pow(b1, double(t))), c = std::sqrt(1 - std::pow(b2, double(t)));
    const double d = std::sqrt(v1) / c + eps, update = step_size * std::abs(m1) / d;
    // m and v: their own roundings, and the gradient's difference dg, which moves m by (1−β₁)·dg and v by
    // (1−β₂)·(2|g| + dg)·dg. The update s·m/(√v/c + ε): its own roundings (the step size included), m's
    // difference carried through s/D, and v's relative difference halved by the square root.
    const double dm = 2 * gamma32(4) * tm + (1 - b1) * dg;
    const double dv = 2 * gamma32(5) * tv + (1 - b2) * (2 * std::abs(g) + dg) * dg;
    const double du = 2 * gamma32(7) * update + step_size * dm / d + (v1 > 0 ? update * dv / (2 * v1) : 0);
    const double decay = wd > 0 ? 2 * gamma32(3) * std::abs(w) : 0; // 1 − lr·wd rounded in float or double
    return {2 * gamma32(2) * (std::abs(w) + update) + du + decay, dm, dv};
}

/// Clips `g` (the unscaled gradients) to the global norm c as mixprec does, and returns what each element
/// may differ by from PyTorch's clip_grad_norm_: it multiplies by c / (‖g‖ + 1e-6) (clamped to 1) with the
/// norm in float32, mixprec by c / ‖g‖ with the norm in double. Their factors differ relatively by at most
/// 1e-6/‖g‖ plus the float32 norm's error (γ of the element count + 4: the squares, the sum, the square
/// root, the division), and each product rounds once.
std::vector<std::vector<double>> clipped_gradients(std::vector<std::vector<float>>& g, const json& o) {
    std::vector<std::vector<double>> dg;
    double sum = 0;
    int n = 0;
    for (const auto& v : g) {
        dg.emplace_back(v.size(), 0.0);
        for (float x : v) sum += double(x) * x, ++n;
    }
    if (!o.contains("clip_global_norm")) return dg;
    const double c = o.at("clip_global_norm").get<float>(), norm = std::sqrt(sum);
    if (!(norm > c - 1e-6) || !std::isfinite(norm)) return dg;
    const double relative = 1e-6 / norm + 2 * gamma32(n + 4) + 2 * u;
    for (std::size_t i = 0; i < g.size(); ++i)
        for (std::size_t k = 0; k < g[i].size(); ++k) {
            if (norm > c) g[i][k] *= float(c / norm);
            dg[i][k] = std::abs(double(g[i][k])) * relative;
        }
    return dg;
}

class CaseReplay {
  public:
    CaseReplay(const json& c, const std::string& library, Replay& totals)
        : name_(c.at("case")), library_(library), optimizer_(c.at("optimizer")), totals_(totals) {
        amp::LossScaleOptions options = amp::loss_scale_preset(c.at("preset").get<std::string>());
        conformance::set_options(options, c.at("loss_scale"));
        std::size_t i = 0;
        for (const auto& w : c.at("initial")) {
            weights_.push_back(parse_floats(w));
            std::string name = "w"; // appended, not "w" + ...: GCC 12 warns falsely (-Wrestrict) on the latter
            name += std::to_string(i++);
            vars_.emplace_back(float32_tensor(weights_.back()), name);
        }
        opt_ = std::make_unique<amp::LossScaleOptimizer>(inner_optimizer(optimizer_), options);
    }

    /// One step from the library's state after the previous one; returns the first difference, or "".
    std::string step(const json& s) {
        resync();
        const float inverse = 1.0f / opt_->scale();
        const json& micro_batches = s.at("micro_batches");
        std::vector<std::vector<float>> unscaled; // Σ micro-batches × 1/S, as both sides compute it
        for (const auto& mb : micro_batches)
            for (std::size_t i = 0; i < mb.size(); ++i) {
                const std::vector<float> g = parse_floats(mb[i]);
                if (unscaled.size() <= i) unscaled.emplace_back(g.size(), 0.0f);
                for (std::size_t k = 0; k < g.size(); ++k) unscaled[i][k] += g[k];
            }
        for (auto& g : unscaled)
            for (float& x : g) x *= inverse;
        const std::vector<std::vector<double>> dg = clipped_gradients(unscaled, optimizer_);
        const auto tensors = [](const json& mb) {
            std::vector<autodiff::Tensor> grads;
            for (const auto& g : mb) grads.push_back(float32_tensor(parse_floats(g)));
            return grads;
        };
        bool applied = false;
        if (micro_batches.size() == 1) {
            applied = opt_->apply(tensors(micro_batches[0]), vars_);
        } else {
            for (const auto& mb : micro_batches) opt_->accumulate(tensors(mb));
            applied = opt_->apply_accumulated(vars_);
        }
        const std::string at = name_ + " step " + std::to_string(s.at("step").get<int>()) + ": ";
        if (applied != s.at("applied").get<bool>())
            return at + (applied ? "applied in mixprec, skipped in " : "skipped in mixprec, applied in ") + library_;
        if (opt_->iterations() != s.at("iterations").get<std::int64_t>())
            return at + "iterations " + std::to_string(opt_->iterations()) + " in mixprec, " +
                   s.at("iterations").dump() + " in " + library_;
        const float scale = conformance::parse_float32(s.at("scale"));
        if (opt_->scale() != scale)
            return at + "scale " + number(opt_->scale()) + " in mixprec, " + number(scale) + " in " + library_;
        if (opt_->loss_scale().state().growth_counter != s.at("growth_counter").get<std::int64_t>())
            return at + "growth counter differs";

        const std::string kind = optimizer_.at("kind");
        const std::vector<std::string> slot_names =
            kind == "sgd" ? std::vector<std::string>{"momentum"} : std::vector<std::string>{"m", "v"};
        std::string failure;
        for (std::size_t i = 0; i < vars_.size() && failure.empty(); ++i) {
            const std::vector<float> theirs = parse_floats(s.at("weights")[i]), ours = vars_[i].value().to_floats();
            std::vector<std::vector<float>> their_slots, our_slots, slots_before;
            for (const std::string& name : slot_names)
                if (s.at("slots").contains(name)) {
                    their_slots.push_back(parse_floats(s.at("slots").at(name)[i]));
                    const std::span<float> o = opt_->slot_data(name, i);
                    our_slots.emplace_back(o.begin(), o.end());
                    slots_before.push_back(slots_.count(name) ? slots_.at(name)[i]
                                                              : std::vector<float>(theirs.size(), 0.0f));
                }
            for (std::size_t k = 0; k < theirs.size() && failure.empty(); ++k) {
                Bounds b;
                if (applied && kind == "sgd")
                    b = sgd_bounds(optimizer_, weights_[i][k], slots_before.empty() ? 0 : slots_before[0][k],
                                   unscaled[i][k], dg[i][k], !slots_.count("momentum"));
                else if (applied)
                    b = adam_bounds(optimizer_, weights_[i][k], slots_before[0][k], slots_before[1][k], unscaled[i][k],
                                    dg[i][k], their_slots[0][k], their_slots[1][k], opt_->iterations());
                failure = check("weight", i, k, theirs[k], ours[k], b.weight);
                for (std::size_t j = 0; j < their_slots.size() && failure.empty(); ++j)
                    failure =
                        check("slot " + slot_names[j], i, k, their_slots[j][k], our_slots[j][k], j ? b.slot1 : b.slot0);
            }
        }
        // The library's state after this step is where the next step starts.
        for (std::size_t i = 0; i < vars_.size(); ++i) weights_[i] = parse_floats(s.at("weights")[i]);
        for (const auto& [name, values] : s.at("slots").items()) {
            slots_[name].clear();
            for (const auto& v : values) slots_[name].push_back(parse_floats(v));
        }
        return failure.empty() ? "" : at + failure;
    }

  private:
    void resync() {
        for (std::size_t i = 0; i < vars_.size(); ++i) vars_[i].assign(float32_tensor(weights_[i]));
        for (const auto& [name, values] : slots_)
            for (std::size_t i = 0; i < values.size(); ++i)
                std::ranges::copy(values[i], opt_->slot_data(name, i).begin());
    }

    std::string check(const std::string& what, std::size_t i, std::size_t k, float theirs, float ours, double bound) {
        const std::int64_t d = ulps(theirs, ours);
        ++totals_.compared;
        if (d == 0) {
            ++totals_.identical;
            return "";
        }
        totals_.largest_ulps = std::max(totals_.largest_ulps, d);
        const double diff = std::abs(double(theirs) - double(ours));
        totals_.largest_share = std::max(totals_.largest_share, bound > 0 ? diff / bound : INFINITY);
        if (diff <= bound) return "";
        return what + " of variable " + std::to_string(i) + "[" + std::to_string(k) + "]: " + number(ours) +
               " in mixprec, " + number(theirs) + " in " + library_ + " (" + std::to_string(d) +
               " ulp; the bound allows " + number(bound) + ")";
    }

    std::string name_, library_;
    json optimizer_;
    Replay& totals_;
    std::vector<autodiff::Variable> vars_;
    std::unique_ptr<amp::LossScaleOptimizer> opt_;
    std::vector<std::vector<float>> weights_;                      // the library's, after the last step
    std::map<std::string, std::vector<std::vector<float>>> slots_; // the library's, once it has them
};

Replay replay(const std::filesystem::path& path, bool verbose) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line)) throw std::runtime_error(path.string() + ": empty");
    const json header = json::parse(line);
    Replay r{header.at("library"), header.at("version")};
    std::unique_ptr<CaseReplay> current;
    std::string failure;
    const auto finish_case = [&] {
        if (!failure.empty()) {
            ++r.failures;
            std::cout << "DIFFERS " << r.library << " " << r.version << " " << failure << "\n";
        }
        failure.clear();
    };
    while (std::getline(in, line)) {
        const json j = json::parse(line);
        if (j.contains("case")) {
            if (current) finish_case();
            current = std::make_unique<CaseReplay>(j, r.library, r);
            ++r.cases;
            if (verbose) std::cout << "  " << r.library << " " << j.at("case").get<std::string>() << "\n";
        } else {
            if (!current) throw std::runtime_error(path.string() + ": a step before any case");
            ++r.steps;
            if (failure.empty()) failure = current->step(j);
        }
    }
    if (current) finish_case();
    return r;
}

std::string result(const Replay& r) {
    if (r.failures) return std::to_string(r.failures) + " cases differ beyond the bound";
    char text[200];
    std::snprintf(text, sizeof text,
                  "skips, iterations, scale identical; %zu of %zu weights and slots bit-identical, the rest within "
                  "the bound (at most %lld ulp, %.0f%% of the bound)",
                  r.identical, r.compared, static_cast<long long>(r.largest_ulps), 100 * r.largest_share);
    return text;
}

} // namespace

int main(int argc, char** argv) {
    const std::optional<conformance::Arguments> args = conformance::parse_arguments(argc, argv);
    if (!args) return 2;
    bool ok = true;
    std::cout << "| library | version | object | cases | steps | result |\n|---|---|---|---:|---:|---|\n";
    for (const auto& f : args->files) {
        try {
            const Replay r = replay(f, args->verbose);
            ok = ok && r.failures == 0;
            std::cout << "| " << r.library << " | " << r.version << " | loss-scaled SGD, Adam, AdamW | " << r.cases
                      << " | " << r.steps << " | " << result(r) << " |\n";
        } catch (const std::exception& e) {
            std::cout << "ERROR " << f.string() << ": " << e.what() << "\n";
            ok = false;
        }
    }
    return ok ? 0 : 1;
}
