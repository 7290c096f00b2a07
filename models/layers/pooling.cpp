// MaxPool2D, AvgPool2D and GlobalAveragePooling1D (see pooling.hpp).

#include <mixprec/models/layers/pooling.hpp>

#include <mixprec/models/layers/detail/checks.hpp>
#include <mixprec/models/layers/layers_core.hpp>

#include <mixprec/autodiff/ops_pool.hpp>
#include <mixprec/autodiff/ops_reduce.hpp>

#include <string>

namespace mixprec::models {
namespace {

namespace ad = mixprec::autodiff;
using detail::check_positive;
using detail::pair_string;

/// Checks a pooling layer's example (C, H, W) against its window and returns the output example.
Shape pooled_shape(const Layer& layer, const Shape& in, Size2 pool, Size2 stride) {
    std::string expected = "(C, H, W) with H >= ";
    expected += std::to_string(pool[0]);
    expected += " and W >= ";
    expected += std::to_string(pool[1]);
    if (in.rank() != 3 || in[1] < pool[0] || in[2] < pool[1]) throw_input_shape_error(layer, in, expected);
    return Shape{in[0], (in[1] - pool[0]) / stride[0] + 1, (in[2] - pool[1]) / stride[1] + 1};
}

std::string pool_config(Size2 pool, Size2 stride) {
    std::string c = "pool_size=";
    c += pair_string(pool);
    if (stride != pool) {
        c += ", strides=";
        c += pair_string(stride);
    }
    return c;
}

Size2 default_stride(Size2 pool, Size2 stride) {
    return {stride[0] == 0 ? pool[0] : stride[0], stride[1] == 0 ? pool[1] : stride[1]};
}

} // namespace

// ---- pooling ----

Pool2D::Pool2D(const char* who, Size2 pool, Size2 stride) : pool_(pool), stride_(default_stride(pool, stride)) {
    check_positive(who, "pool size", pool_);
}

std::string Pool2D::config() const { return pool_config(pool_, stride_); }

Shape Pool2D::do_build(const Shape& input_shape, Rng&) { return pooled_shape(*this, input_shape, pool_, stride_); }

Tensor MaxPool2D::forward(const Tensor& x, const CallContext&) { return autodiff::max_pool2d(x, pool_, stride_); }

Tensor AvgPool2D::forward(const Tensor& x, const CallContext&) { return autodiff::avg_pool2d(x, pool_, stride_); }

// ---- GlobalAveragePooling1D -------------------------------------------------------------------------

Shape GlobalAveragePooling1D::do_build(const Shape& input_shape, Rng&) {
    if (input_shape.rank() != 2 || input_shape[0] == 0)
        throw ad::shape_error(describe_layer(*this) +
                              " expects examples of shape (tokens, width) with tokens ≥ 1, got " +
                              input_shape.to_string());
    return Shape{input_shape[1]};
}

Tensor GlobalAveragePooling1D::forward(const Tensor& x, const CallContext&) { return ad::mean(x, {1}); }

} // namespace mixprec::models
