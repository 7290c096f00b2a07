// LayerNorm (see layers_norm.hpp).

#include <mixprec/models/layers/layers_norm.hpp>

#include <mixprec/models/layers/initializers.hpp>
#include <mixprec/models/layers/layers_core.hpp>

#include <mixprec/autodiff/ops_nn.hpp>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace mixprec::models {

// ---- LayerNorm ----

LayerNorm::LayerNorm(float epsilon) : epsilon_(epsilon) {
    if (!(std::isfinite(epsilon) && epsilon > 0.0f)) {
        std::ostringstream message;
        message << "LayerNorm: epsilon must be finite and > 0, got " << epsilon;
        throw std::invalid_argument(message.str());
    }
}

std::string LayerNorm::config() const {
    std::ostringstream c;
    c << "epsilon=" << epsilon_;
    return c.str();
}

std::vector<Variable> LayerNorm::variables() const {
    std::vector<Variable> v;
    if (gamma_) v.push_back(*gamma_);
    if (beta_) v.push_back(*beta_);
    return v;
}

Shape LayerNorm::do_build(const Shape& input_shape, Rng&) {
    if (input_shape.rank() == 0 || input_shape[input_shape.rank() - 1] == 0)
        throw_input_shape_error(*this, input_shape, "(..., d) with d >= 1");
    const Shape param{input_shape[input_shape.rank() - 1]};
    gamma_ = make_variable(ones(param), "gamma");
    beta_ = make_variable(zeros(param), "beta");
    return input_shape;
}

Tensor LayerNorm::forward(const Tensor& x, const CallContext&) {
    return autodiff::layer_norm(x, gamma_->read(), beta_->read(), epsilon_);
}

} // namespace mixprec::models
