#include <mixprec/optim/adam.hpp>

#include <mixprec/optim/detail/adam_step.hpp>
#include <mixprec/optim/detail/in_pieces.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace mixprec::optim {

namespace {
void require(bool ok, const char* who, const char* what, float value) {
    if (ok) return;
    std::ostringstream message;
    message << who << ": " << what << " (got " << value << ")";
    throw std::invalid_argument(message.str());
}
} // namespace

Adam::Adam(Options options) : Adam(std::move(options), 0.0f, "Adam") {}

Adam::Adam(Options options, float weight_decay, const char* who)
    : SlotOptimizer(options.learning_rate, options.clip), options_(std::move(options)), weight_decay_(weight_decay) {
    require(options_.beta1 >= 0 && options_.beta1 < 1, who, "beta1 must be in [0, 1)", options_.beta1);
    require(options_.beta2 >= 0 && options_.beta2 < 1, who, "beta2 must be in [0, 1)", options_.beta2);
    require(std::isfinite(options_.epsilon) && options_.epsilon >= 0, who, "epsilon must be finite and >= 0",
            options_.epsilon);
    require(std::isfinite(weight_decay) && weight_decay >= 0, who, "weight_decay must be finite and >= 0",
            weight_decay);
}

std::vector<std::string> Adam::slot_names() const {
    if (options_.amsgrad) return {"m", "v", "v_max"};
    return {"m", "v"};
}

namespace {

/// The Adam update of n elements: m ← m + (1−β₁)(g − m), v ← β₂v + (1−β₂)g², then
/// w ← w·decay − step_size · m̂ / (√v̂ + ε), with √v̂ = √v / bc2_sqrt and
/// (amsgrad) v replaced by the running maximum. One pass, no aliasing, run at the vector width of the
/// instruction-set level (autodiff/tensor/detail/isa_kernels.hpp); every width rounds each operation as the scalar code
/// does (no FMA contraction: see optim/sources.cmake), so all give the same bits. From avx512 up,
/// detail::adam_avx512 runs instead (the same bits, without the slow path of subnormal state).
[[gnu::always_inline]] inline void adam_loop(std::size_t n, float* __restrict w, float* __restrict m,
                                             float* __restrict v, float* __restrict v_max, const float* __restrict g,
                                             const detail::AdamCoefficients& k) {
    const auto [c1, b2, c2, eps, step_size, bc2_sqrt, decay] = k;
    if (v_max) {
        for (std::size_t i = 0; i < n; ++i) {
            m[i] += c1 * (g[i] - m[i]);
            v[i] = b2 * v[i] + c2 * g[i] * g[i];
            v_max[i] = std::max(v_max[i], v[i]);
            w[i] = w[i] * decay - step_size * m[i] / (std::sqrt(v_max[i]) / bc2_sqrt + eps);
        }
        return;
    }
    for (std::size_t i = 0; i < n; ++i) {
        m[i] += c1 * (g[i] - m[i]);
        v[i] = b2 * v[i] + c2 * g[i] * g[i];
        w[i] = w[i] * decay - step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
    }
}

} // namespace

void Adam::update(std::size_t index, std::span<float> w, std::span<const float> g, float lr, std::int64_t step) {
    const double t = double(step);
    const double beta1 = options_.beta1, beta2 = options_.beta2;
    const float step_size = float(double(lr) / (1.0 - std::pow(beta1, t)));
    const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(beta2, t)));
    // The coefficients are rounded once from the doubles (1 − β exactly as PyTorch and Keras form it; m by
    // interpolation, as both do).
    const detail::AdamCoefficients k{.c1 = float(1.0 - beta1),
                                     .b2 = float(beta2),
                                     .c2 = float(1.0 - beta2),
                                     .eps = options_.epsilon,
                                     .step_size = step_size,
                                     .bc2_sqrt = bc2_sqrt,
                                     .decay = 1.0f - lr * weight_decay_};
    float* const m = slot(0, index).data();
    float* const v = slot(1, index).data();
    float* const v_max = options_.amsgrad ? slot(2, index).data() : nullptr;
    detail::in_pieces(
        w.size(),
        [&](std::size_t lo, std::size_t hi) {
            adam_loop(hi - lo, w.data() + lo, m + lo, v + lo, v_max ? v_max + lo : nullptr, g.data() + lo, k);
        },
        [&](std::size_t lo, std::size_t hi) {
            detail::adam_avx512(hi - lo, w.data() + lo, m + lo, v + lo, v_max ? v_max + lo : nullptr, g.data() + lo, k);
        });
}

AdamW::AdamW(Options o)
    : Adam({.learning_rate = o.learning_rate,
            .beta1 = o.beta1,
            .beta2 = o.beta2,
            .epsilon = o.epsilon,
            .amsgrad = o.amsgrad,
            .clip = o.clip},
           o.weight_decay, "AdamW"),
      options_(std::move(o)) {}

Adam::Adam() : Adam(Options{}) {}

AdamW::AdamW() : AdamW(Options{}) {}

} // namespace mixprec::optim
