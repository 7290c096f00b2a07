// Embedding, Patches and PositionEmbedding (see embedding.hpp).

#include <mixprec/models/layers/embedding.hpp>

#include <mixprec/models/layers/detail/checks.hpp>
#include <mixprec/models/layers/initializers.hpp>
#include <mixprec/models/layers/layers_core.hpp>

#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_nn.hpp>
#include <mixprec/autodiff/ops_shape.hpp>

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace mixprec::models {

namespace ad = mixprec::autodiff;

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
            message << describe_layer(*this) << ": the id at position " << i << " of the batch " << x.shape() << " is "
                    << std::setprecision(9) << v << ", not an integer in [0, " << vocab_ << ")";
            throw std::invalid_argument(message.str());
        }
        ids[i] = static_cast<std::int32_t>(v);
    }
    return autodiff::embedding(table_->read(), ids, x.shape());
}

// ---- Patches ----------------------------------------------------------------------------------------

Patches::Patches(std::size_t patch) : patch_(patch) {
    if (patch == 0) throw std::invalid_argument("Patches: the patch size must be at least 1, got 0");
}

std::string Patches::config() const { return "patch=" + std::to_string(patch_); }

Shape Patches::do_build(const Shape& input_shape, Rng&) {
    const std::size_t p = patch_;
    if (input_shape.rank() != 3 || input_shape.elements() == 0 || input_shape[1] % p != 0 || input_shape[2] % p != 0)
        throw ad::shape_error(
            describe_layer(*this) + " expects images (channels, height, width) with height and width " +
            "non-zero multiples of the patch size " + std::to_string(p) + ", got " + input_shape.to_string());
    const std::size_t rows = input_shape[1] / p, cols = input_shape[2] / p;
    return Shape{rows * cols, input_shape[0] * p * p};
}

Tensor Patches::forward(const Tensor& x, const CallContext&) {
    const std::size_t batch = x.shape()[0], channels = x.shape()[1], p = patch_;
    const std::size_t rows = x.shape()[2] / p, cols = x.shape()[3] / p;
    // (B, C, H, W) -> (B, C, H/p, p, W/p, p) -> (B, H/p, W/p, C, p, p) -> (B, tokens, C·p·p)
    const Tensor split = ad::reshape(x, Shape{batch, channels, rows, p, cols, p});
    return ad::reshape(ad::transpose(split, {0, 2, 4, 1, 3, 5}), Shape{batch, rows * cols, channels * p * p});
}

// ---- PositionEmbedding ------------------------------------------------------------------------------

std::vector<Variable> PositionEmbedding::variables() const { return table_; }

Shape PositionEmbedding::do_build(const Shape& input_shape, Rng& init_rng) {
    detail::require_tokens(*this, input_shape);
    table_ = {make_variable(random_uniform(input_shape, -0.05f, 0.05f, init_rng), "embeddings")};
    return input_shape;
}

Tensor PositionEmbedding::forward(const Tensor& x, const CallContext&) { return ad::add(x, table_[0].read()); }

} // namespace mixprec::models
