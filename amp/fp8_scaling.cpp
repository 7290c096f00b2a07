#include <mixprec/amp/fp8_scaling.hpp>

#include <mixprec/amp/telemetry.hpp>
#include <mixprec/autodiff/tensor/rng.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace mixprec::amp {

using autodiff::Dtype;

float fp8_max(Dtype format) {
    switch (format) {
    case Dtype::float8_e4m3:
        return 448.0f;
    case Dtype::float8_e5m2:
        return 57344.0f;
    default:
        throw std::invalid_argument("fp8 scaling: " + std::string(autodiff::name_of(format)) +
                                    " is not an FP8 format (float8_e4m3 or float8_e5m2)");
    }
}

Fp8Scaling::Fp8Scaling(Fp8ScalingOptions options) : options_(options) {
    const auto check = [](bool ok, const std::string& what) {
        if (!ok) throw std::invalid_argument("Fp8ScalingOptions: " + what);
    };
    check(options.history_length >= 1 && options.history_length <= 1024,
          "history_length must be 1 ... 1024, got " + std::to_string(options.history_length));
    check(options.margin >= 0 && options.margin <= 32,
          "margin must be 0 ... 32, got " + std::to_string(options.margin));
    check(options.epsilon >= 0.0f && std::isfinite(options.epsilon),
          "epsilon must be finite and at least 0, got " + std::to_string(options.epsilon));
    fp8_max(options.forward);
    fp8_max(options.backward);
    if (!options_.stochastic_gradients) options_.seed = 0;
}

namespace {

/// 64-bit FNV-1a of `text`, continuing from `hash` (so that hashing "a" and then "b" hashes "ab").
std::uint64_t fnv1a64(std::string_view text, std::uint64_t hash = 0xcbf29ce484222325ull) {
    for (const char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return hash;
}

} // namespace

autodiff::Fp8DenseCasts Fp8Scaling::dense_casts(const std::string& layer) {
    const auto cast = [this, &layer](const char* tensor, Dtype format) {
        return autodiff::Fp8Cast{
            format, [this, name = layer + "/" + tensor, format](float amax) { return scale_for(name, format, amax); }};
    };
    // Unscaled gradients are left to the loss scale, which must see their overflows.
    autodiff::Fp8Cast grad = options_.scale_gradients ? cast("output_grad", options_.backward)
                                                      : autodiff::Fp8Cast{options_.backward, [](float) { return 1.0f; },
                                                                          autodiff::Overflow::infinity};
    if (options_.stochastic_gradients) {
        using autodiff::counter_bits;
        const std::uint64_t call = calls_[layer]++;
        grad.stochastic = counter_bits(
            counter_bits(counter_bits(options_.seed, steps_), fnv1a64("/output_grad", fnv1a64(layer))), call);
    }
    autodiff::Fp8DenseCasts casts{cast("input", options_.forward), cast("kernel", options_.forward), std::move(grad)};
    if (StepTelemetry::active() != nullptr) // a step that records telemetry: report what each cast did
        for (auto [c, tensor] :
             {std::pair{&casts.input, "input"}, {&casts.kernel, "kernel"}, {&casts.output_grad, "output_grad"}})
            c->observe = [name = layer + std::string("/fp8_").append(tensor)](const autodiff::RoundingStats& stats) {
                if (StepTelemetry* t = StepTelemetry::active()) t->add(name, stats);
            };
    return casts;
}

float Fp8Scaling::scale_from(float amax, Dtype format, int margin) const {
    float s = fp8_max(format) / amax;
    if (margin != 0) s = std::ldexp(s, -margin);
    if (std::isinf(s)) s = std::numeric_limits<float>::max();
    if (options_.power_of_two) s = std::bit_cast<float>(std::bit_cast<std::uint32_t>(s) & 0xFF800000u);
    return s;
}

float Fp8Scaling::scale_for(const std::string& name, Dtype format, float amax) {
    if (options_.recipe == Fp8Recipe::current) {
        if (amax == 0.0f || !std::isfinite(amax)) return 1.0f;
        return scale_from(std::max(amax, options_.epsilon), format, 0);
    }
    Tensor& t = tensors_[name];
    t.format = format;
    t.step_amax = t.cast_this_step ? std::max(t.step_amax, amax) : amax;
    t.cast_this_step = true;
    return t.scale;
}

void Fp8Scaling::agree(optim::Communicator& communicator) {
    if (options_.recipe == Fp8Recipe::current) return;
    std::vector<float> amaxes;
    for (const auto& [name, t] : tensors_) amaxes.push_back(t.cast_this_step ? t.step_amax : 0.0f);
    communicator.max(amaxes);
    std::size_t i = 0;
    for (auto& [name, t] : tensors_) t.step_amax = amaxes[i++];
}

void Fp8Scaling::end_step() {
    ++steps_;
    calls_.clear();
    if (options_.recipe == Fp8Recipe::current) return;
    const auto length = static_cast<std::size_t>(options_.history_length);
    for (auto& [name, t] : tensors_) {
        if (!t.cast_this_step) continue;
        if (t.history.size() == length) t.history.erase(t.history.begin());
        t.history.push_back(t.step_amax);
        t.cast_this_step = false;
        t.step_amax = 0.0f;
        const float a = options_.amax_compute == AmaxCompute::max
                            ? *std::max_element(t.history.begin(), t.history.end())
                            : t.history.back();
        if (std::isfinite(a) && a > 0.0f) t.scale = scale_from(a, t.format, options_.margin);
    }
}

} // namespace mixprec::amp
