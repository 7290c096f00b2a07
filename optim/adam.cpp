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
    const detail::Arrays a{
        w.data(),
        {slot(0, index).data(), slot(1, index).data(), options_.amsgrad ? slot(2, index).data() : nullptr},
        g.data()};
    // One pass, at the vector width of the level in use; every width and kernel rounds each operation as
    // the rule's scalar code does (no FMA contraction: see CMakeLists.txt), so all give the same bits.
    detail::in_pieces(
        w.size(), a,
        [&](std::size_t n, const detail::Arrays& part) {
            if (a.s[2])
                detail::lane_by_lane(n, part, detail::AdamRule<true>{k});
            else
                detail::lane_by_lane(n, part, detail::AdamRule<false>{k});
        },
        [&](std::size_t n, const detail::Arrays& part, bool in_double) { detail::adam_avx2(n, part, k, in_double); },
        [&](std::size_t n, const detail::Arrays& part, bool in_double) { detail::adam_avx512(n, part, k, in_double); });
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
