#include <mixprec/optim/sgd.hpp>

#include <mixprec/optim/detail/in_pieces.hpp>
#include <mixprec/optim/detail/sgd_step.hpp>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace mixprec::optim {

namespace {
void require(bool ok, const char* what, float value) {
    if (ok) return;
    std::ostringstream message;
    message << "SGD: " << what << " (got " << value << ")";
    throw std::invalid_argument(message.str());
}
} // namespace

SGD::SGD(Options options) : SlotOptimizer(options.learning_rate, options.clip), options_(std::move(options)) {
    require(std::isfinite(options_.momentum) && options_.momentum >= 0, "momentum must be finite and >= 0",
            options_.momentum);
    require(!options_.nesterov || options_.momentum > 0, "nesterov needs momentum > 0", options_.momentum);
    require(std::isfinite(options_.weight_decay) && options_.weight_decay >= 0, "weight_decay must be finite and >= 0",
            options_.weight_decay);
}

std::vector<std::string> SGD::slot_names() const {
    if (options_.momentum > 0) return {"momentum"};
    return {};
}

namespace {

/// One SGD step over n elements (see sgd.hpp for the rule): g' = g + wd·w; b = g' on the first step, else
/// μ·b + g'; w -= lr · (nesterov ? g' + μ·b : b); without momentum (b == nullptr) w -= lr · g'. Vectorized
/// like the Adam loop, with the same rounding at every width. From avx512 up, detail::sgd_avx512 runs
/// instead (the same bits, without the slow path of subnormal state).
[[gnu::always_inline]] inline void sgd_loop(std::size_t n, float* __restrict w, float* __restrict b,
                                            const float* __restrict grad, float lr, float mu, float wd, bool first,
                                            bool nesterov) {
    if (!b) {
        for (std::size_t i = 0; i < n; ++i) w[i] -= lr * (grad[i] + wd * w[i]);
        return;
    }
    for (std::size_t i = 0; i < n; ++i) {
        const float g = grad[i] + wd * w[i];
        b[i] = first ? g : mu * b[i] + g; // b starts as the first gradient itself
        w[i] -= lr * (nesterov ? g + mu * b[i] : b[i]);
    }
}

} // namespace

void SGD::update(std::size_t index, std::span<float> w, std::span<const float> grad, float lr, std::int64_t step) {
    const float mu = options_.momentum;
    float* const b = mu == 0 ? nullptr : slot(0, index).data();
    const detail::SgdCoefficients k{lr, mu, options_.weight_decay, step == 1, options_.nesterov};
    detail::in_pieces(
        w.size(),
        [&](std::size_t lo, std::size_t hi) {
            sgd_loop(hi - lo, w.data() + lo, b ? b + lo : nullptr, grad.data() + lo, lr, mu, options_.weight_decay,
                     step == 1, options_.nesterov);
        },
        [&](std::size_t lo, std::size_t hi) {
            detail::sgd_avx512(hi - lo, w.data() + lo, b ? b + lo : nullptr, grad.data() + lo, k);
        });
}

SGD::SGD() : SGD(Options{}) {}

} // namespace mixprec::optim
