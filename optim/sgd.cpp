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

void SGD::update(std::size_t index, std::span<float> w, std::span<const float> grad, float lr, std::int64_t step) {
    const float mu = options_.momentum;
    const detail::SgdCoefficients k{lr, mu, options_.weight_decay, step == 1, options_.nesterov};
    const detail::Arrays a{w.data(), {mu == 0 ? nullptr : slot(0, index).data(), nullptr, nullptr}, grad.data()};
    // As Adam::update: the same bits at every width and in every kernel.
    detail::in_pieces(
        w.size(), a,
        [&](std::size_t n, const detail::Arrays& part) {
            if (a.s[0])
                detail::lane_by_lane(n, part, detail::SgdRule<true>{k});
            else
                detail::lane_by_lane(n, part, detail::SgdRule<false>{k});
        },
        [&](std::size_t n, const detail::Arrays& part, bool in_double) { detail::sgd_avx2(n, part, k, in_double); },
        [&](std::size_t n, const detail::Arrays& part, bool in_double) { detail::sgd_avx512(n, part, k, in_double); });
}

SGD::SGD() : SGD(Options{}) {}

} // namespace mixprec::optim
