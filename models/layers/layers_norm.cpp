// LayerNorm and Embedding (see layers_norm.hpp).

#include <mixprec/models/layers/layers_norm.hpp>

#include <mixprec/models/layers/initializers.hpp>
#include <mixprec/models/layers/layers_core.hpp>

#include <mixprec/autodiff/ops_nn.hpp>

#include <cmath>
#include <cstdint>
#include <iomanip>
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

// ---- Embedding ----

namespace {
constexpr std::size_t max_vocab = std::size_t{1} << 24; // every id below is exact in float32
} // namespace

Embedding::Embedding(std::size_t vocab, std::size_t dim) : vocab_(vocab), dim_(dim) {
    if (vocab_ == 0 || dim_ == 0 || vocab_ > max_vocab) {
        std::string message = "Embedding: needs 0 < vocab <= 2^24 and dim > 0, got vocab = ";
        message += std::to_string(vocab_);
        message += ", dim = ";
        message += std::to_string(dim_);
        throw std::invalid_argument(message);
    }
}

std::string Embedding::config() const {
    std::string c = "input_dim=";
    c += std::to_string(vocab_);
    c += ", output_dim=";
    c += std::to_string(dim_);
    return c;
}

std::vector<Variable> Embedding::variables() const {
    if (table_) return {*table_};
    return {};
}

Shape Embedding::do_build(const Shape& input_shape, Rng& init_rng) {
    // The batch axis and the embedding axis must still fit in a shape.
    if (input_shape.rank() + 2 > Shape::max_rank)
        throw_input_shape_error(*this, input_shape, "(ids...) of rank <= " + std::to_string(Shape::max_rank - 2));
    table_ = make_variable(random_uniform(Shape{vocab_, dim_}, -0.05f, 0.05f, init_rng), "embeddings");
    std::vector<std::size_t> out(input_shape.begin(), input_shape.end());
    out.push_back(dim_);
    return Shape(std::span<const std::size_t>(out));
}

Tensor Embedding::forward(const Tensor& x, const CallContext&) {
    const std::vector<float> values = x.to_floats();
    std::vector<std::int32_t> ids(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        const float v = values[i];
        // The negated test also catches NaN.
        if (!(v >= 0.0f && v < static_cast<float>(vocab_) && v == std::floor(v))) {
            std::ostringstream message;
            message << describe_layer(*this) << ": the id at position " << i << " of the batch "
                    << x.shape() << " is " << std::setprecision(9) << v << ", not an integer in [0, " << vocab_ << ")";
            throw std::invalid_argument(message.str());
        }
        ids[i] = static_cast<std::int32_t>(v);
    }
    return autodiff::embedding(table_->read(), ids, x.shape());
}

} // namespace mixprec::models
