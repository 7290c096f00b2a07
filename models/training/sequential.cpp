// Sequential: each layer feeding the next (see sequential.hpp).

#include <mixprec/models/training/sequential.hpp>

namespace mixprec::models {

Tensor Sequential::call(const Tensor& x, const CallContext& context) {
    Tensor y = x;
    const auto& all = layers();
    for (std::size_t i = 0; i < all.size(); ++i) {
        if (i + 1 < all.size())
            if (std::optional<Tensor> both = all[i]->call_fused(*all[i + 1], y, context)) {
                y = std::move(*both);
                ++i; // the next layer's work is done
                continue;
            }
        y = (*all[i])(y, context);
    }
    return y;
}

Shape Sequential::build_layers(const Shape& input_shape, Rng& init_rng) {
    Shape shape = input_shape;
    for (const auto& layer : layers()) shape = layer->build(shape, init_rng);
    return shape;
}

} // namespace mixprec::models
