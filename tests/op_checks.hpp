#pragma once
// Helpers shared by the op tests: random inputs, the three-dtype gradient check, and error messages.

#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace op_checks {

using mixprec::autodiff::Tensor;

/// Uniform magnitudes in [lo, hi], with a random sign unless `positive`; float32.
inline Tensor uniform(const mixprec::autodiff::Shape& shape, float lo, float hi, unsigned seed, bool positive = false) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> magnitude(lo, hi);
    std::bernoulli_distribution negative(0.5);
    std::vector<float> v(shape.elements());
    for (auto& x : v) x = magnitude(gen) * (!positive && negative(gen) ? -1.0f : 1.0f);
    return Tensor::from_floats(shape, v);
}

/// f's backward against finite differences in float32, and its float16 and bfloat16 backwards against
/// the float32 one within the given tolerances (relative to each input's largest gradient).
inline void check_gradients(const std::string& name, const mixprec::autodiff::Function& f,
                            const std::vector<Tensor>& inputs, double f16_tol, double bf16_tol) {
    using namespace mixprec::autodiff;
    const GradcheckResult r = gradcheck(f, inputs);
    BOOST_TEST(r.passed, name << " float32: " << r.worst);
    const GradcheckResult h = gradcheck_against_float32(f, inputs, Dtype::float16, f16_tol, f16_tol);
    BOOST_TEST(h.passed, name << " float16: " << h.worst);
    const GradcheckResult b = gradcheck_against_float32(f, inputs, Dtype::bfloat16, bf16_tol, bf16_tol);
    BOOST_TEST(b.passed, name << " bfloat16: " << b.worst);
}

/// Whether a and b have one shape and dtype and the same bits in every element, a NaN matching any NaN:
/// IEEE 754 leaves the sign and payload of a NaN result open, and of two NaN operands an add passes on
/// the one the compiled code puts first (two threads' NaN partial sums of one convolution's dw, added in
/// one order, came out with either sign depending on which caller the adding loop was compiled into).
inline bool same_bits_any_nan(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
    const std::size_t n = a.shape().elements(), size = n ? a.nbytes() / n : 0;
    const std::vector<float> fa = a.to_floats(), fb = b.to_floats();
    const auto* pa = static_cast<const unsigned char*>(a.raw());
    const auto* pb = static_cast<const unsigned char*>(b.raw());
    for (std::size_t i = 0; i < n; ++i)
        if (!(std::isnan(fa[i]) && std::isnan(fb[i])) && std::memcmp(pa + i * size, pb + i * size, size) != 0)
            return false;
    return true;
}

/// True when f throws E whose message contains every one of `parts`.
template <class E, class F>
bool throws_with(F f, std::initializer_list<const char*> parts) {
    try {
        f();
    } catch (const E& e) {
        const std::string what = e.what();
        for (const char* p : parts)
            if (what.find(p) == std::string::npos) {
                BOOST_TEST_MESSAGE("message lacks '" << p << "': " << what);
                return false;
            }
        return true;
    }
    return false;
}

} // namespace op_checks
