// Seeded weight initializers (see initializers.hpp). Every value is drawn from the given Rng in row-major
// order, so the same generator state gives the same tensor on every run.

#include <mixprec/models/layers/initializers.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::models {

using autodiff::Tensor;

namespace {

// Keras draws he_normal from a normal truncated at ±2σ' with σ' = σ / 0.8796..., the standard deviation
// of a unit normal truncated at ±2: the values then have standard deviation σ itself.
constexpr double truncated_unit_normal_stddev = 0.87962566103423978;

/// A unit normal by Box-Muller on two uniforms; 1 − u keeps the logarithm's argument in (0, 1].
double standard_normal(autodiff::Rng& rng) {
    const double u1 = 1.0 - static_cast<double>(rng.uniform());
    const double u2 = static_cast<double>(rng.uniform());
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
}

Tensor uniform_in(const autodiff::Shape& shape, float low, float high, autodiff::Rng& rng) {
    std::vector<float> values(shape.elements());
    const double width = static_cast<double>(high) - static_cast<double>(low); // no overflow in double
    for (float& v : values) {
        v = static_cast<float>(static_cast<double>(low) + width * static_cast<double>(rng.uniform()));
        // low + width·u with u < 1 can still round up to high; keep the interval half-open.
        if (v >= high && high > low) v = std::nextafter(high, low);
    }
    return Tensor::from_floats(shape, values);
}

} // namespace

Tensor glorot_uniform(const autodiff::Shape& shape, std::size_t fan_in, std::size_t fan_out, autodiff::Rng& rng) {
    if (fan_in + fan_out == 0) throw std::invalid_argument("glorot_uniform: fan_in + fan_out must be > 0, got 0");
    const float limit = static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
    return uniform_in(shape, -limit, limit, rng);
}

Tensor he_normal(const autodiff::Shape& shape, std::size_t fan_in, autodiff::Rng& rng) {
    if (fan_in == 0) throw std::invalid_argument("he_normal: fan_in must be > 0, got 0");
    const double stddev = std::sqrt(2.0 / static_cast<double>(fan_in)) / truncated_unit_normal_stddev;
    std::vector<float> values(shape.elements());
    for (float& v : values) {
        double z = standard_normal(rng);
        while (std::fabs(z) > 2.0) z = standard_normal(rng);
        v = static_cast<float>(z * stddev);
    }
    return Tensor::from_floats(shape, values);
}

Tensor random_uniform(const autodiff::Shape& shape, float low, float high, autodiff::Rng& rng) {
    if (!std::isfinite(low) || !std::isfinite(high) || !(low < high)) {
        std::string message = "random_uniform: needs finite low < high, got low = ";
        message += std::to_string(low);
        message += ", high = ";
        message += std::to_string(high);
        throw std::invalid_argument(message);
    }
    return uniform_in(shape, low, high, rng);
}

Tensor zeros(const autodiff::Shape& shape) { return Tensor(shape); }

Tensor ones(const autodiff::Shape& shape) { return Tensor::full(shape, 1.0f); }

} // namespace mixprec::models
