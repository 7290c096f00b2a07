#include "sgd.hpp"

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
    require(std::isfinite(options_.weight_decay) && options_.weight_decay >= 0,
            "weight_decay must be finite and >= 0", options_.weight_decay);
}

std::vector<std::string> SGD::slot_names() const {
    if (options_.momentum > 0) return {"momentum"};
    return {};
}

void SGD::update(std::size_t index, std::span<float> w, std::span<const float> grad, float lr, std::int64_t step) {
    const float mu = options_.momentum, wd = options_.weight_decay;
    if (mu == 0) {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * (grad[i] + wd * w[i]);
        return;
    }
    std::span<float> b = slot(0, index);
    for (std::size_t i = 0; i < w.size(); ++i) {
        const float g = grad[i] + wd * w[i];
        b[i] = step == 1 ? g : mu * b[i] + g;
        w[i] -= lr * (options_.nesterov ? g + mu * b[i] : b[i]);
    }
}

SGD::SGD() : SGD(Options{}) {}

} // namespace mixprec::optim
