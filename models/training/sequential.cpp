// Sequential: each layer feeding the next (see sequential.hpp).

#include <mixprec/models/training/sequential.hpp>

namespace mixprec::models {

Tensor Sequential::call(const Tensor& x, const CallContext& context) {
    Tensor y = x;
    for (const auto& layer : layers()) y = (*layer)(y, context);
    return y;
}

Shape Sequential::build_layers(const Shape& input_shape, Rng& init_rng) {
    Shape shape = input_shape;
    for (const auto& layer : layers()) shape = layer->build(shape, init_rng);
    return shape;
}

} // namespace mixprec::models
