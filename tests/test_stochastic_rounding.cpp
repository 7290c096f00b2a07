#define BOOST_TEST_MODULE stochastic_rounding
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace mixprec::autodiff;

namespace {

constexpr float infinity = std::numeric_limits<float>::infinity();

/// What the reference needs of a format, from its numeric_limits.
struct format_facts {
    Dtype dtype;
    int digits;       // significand bits, the implicit one included
    int min_exponent; // the smallest normal is 2^(min_exponent - 1)
    double max;       // largest finite
};

template <class T>
format_facts facts() {
    using L = std::numeric_limits<T>;
    return {dtype_of<T>, L::digits, L::min_exponent, double(float(L::max()))};
}

const std::vector<format_facts>& formats() {
    static const std::vector<format_facts> all{facts<float16>(), facts<bfloat16>(), facts<cbfloat16>(),
                                               facts<float8_e4m3>(), facts<float8_e5m2>()};
    return all;
}

/// Stores v in `dtype` (v representable, ±infinity or NaN) and returns what was stored, as float32 bits.
std::uint32_t stored(float v, Dtype dtype, Overflow overflow) {
    std::vector<std::uint8_t> bytes(size_of(dtype));
    narrow(&v, bytes.data(), 1, dtype, overflow);
    float back = 0;
    widen(bytes.data(), dtype, &back, 1);
    return std::bit_cast<std::uint32_t>(back);
}

/// The documented rounding, computed independently in float64: the neighbours from the format's
/// spacing at |x|, frac from their distance, hi when u < ⌊frac · 2^32⌋.
std::uint32_t reference(float x, std::uint32_t u, const format_facts& f, Overflow overflow) {
    if (x == 0.0f || !std::isfinite(x)) return stored(x, f.dtype, overflow);
    const double a = std::fabs(double(x));
    const int exponent = std::max(std::ilogb(a), f.min_exponent - 1); // of the binade, or of the subnormals
    const double spacing = std::ldexp(1.0, exponent - (f.digits - 1));
    const double lo = std::floor(a / spacing) * spacing;
    const double frac = (a - lo) / spacing; // exact: a has 24 bits, spacing is a power of two
    const bool up = double(u) < std::floor(std::ldexp(frac, 32));
    double magnitude = lo + (up ? spacing : 0.0);
    if (magnitude > f.max) magnitude = overflow == Overflow::saturate ? f.max : double(infinity);
    return stored(float(std::copysign(magnitude, double(x))), f.dtype, overflow);
}

std::uint32_t draw(std::uint64_t key, std::uint64_t index) { return std::uint32_t(counter_bits(key, index) >> 32); }

/// src rounded stochastically into f's format, widened back to float32.
std::vector<float> round_trip(const std::vector<float>& src, Dtype dtype, std::uint64_t key, std::uint64_t first,
                              Overflow overflow) {
    std::vector<std::uint8_t> bytes(src.size() * size_of(dtype));
    narrow_stochastic(src.data(), bytes.data(), src.size(), dtype, key, first, overflow);
    std::vector<float> back(src.size());
    widen(bytes.data(), dtype, back.data(), back.size());
    return back;
}

/// Every float32 top-16-bit pattern, each with a few different low halves, ±.
std::vector<float> sweep() {
    std::vector<float> v;
    for (std::uint32_t top = 0; top < 0x10000u; ++top)
        for (std::uint32_t low : {0x0000u, 0x0001u, 0x5A5Au, 0x8000u, 0xFFFFu})
            v.push_back(std::bit_cast<float>((top << 16) | low));
    return v;
}

} // namespace

BOOST_AUTO_TEST_CASE(the_stream_is_splitmix64) {
    // splitmix64 seeded with 0 (Vigna's reference code): its first two outputs.
    BOOST_TEST(counter_bits(0, 0) == 0xe220a8397b1dcdafull);
    BOOST_TEST(counter_bits(0, 1) == 0x6e789e6aa1b965f4ull);
    Rng rng(7);
    for (std::uint64_t i = 0; i < 4; ++i) BOOST_TEST(rng.state()[i] == counter_bits(7, i));
}

BOOST_AUTO_TEST_CASE(every_value_rounds_as_the_reference_says) {
    const std::vector<float> src = sweep();
    for (const format_facts& f : formats())
        for (Overflow overflow : {Overflow::infinity, Overflow::saturate}) {
            const std::uint64_t key = 0x1234u + std::uint64_t(f.dtype);
            const std::vector<float> got = round_trip(src, f.dtype, key, 5, overflow);
            std::size_t bad = 0;
            for (std::size_t i = 0; i < src.size(); ++i) {
                const std::uint32_t want = reference(src[i], draw(key, 5 + i), f, overflow);
                const std::uint32_t have = std::bit_cast<std::uint32_t>(got[i]);
                const bool both_nan = std::isnan(got[i]) && std::isnan(std::bit_cast<float>(want));
                if (have != want && !both_nan && bad++ < 5)
                    BOOST_ERROR(std::string(name_of(f.dtype))
                                << ": " << src[i] << " (0x" << std::hex << std::bit_cast<std::uint32_t>(src[i])
                                << ") gave 0x" << have << ", want 0x" << want << std::dec);
            }
            BOOST_TEST(bad == 0u, name_of(f.dtype) << (overflow == Overflow::saturate ? " saturating" : ""));
        }
}

BOOST_AUTO_TEST_CASE(rounds_up_with_the_distance_to_the_lower_neighbour) {
    // float8_e5m2 around 1 (spacing 0.25), in the subnormals (spacing 2^-16), below half of the smallest
    // subnormal (nearest would give 0), and between the largest finite and the next step (overflow).
    struct probe {
        float x, lo, hi;
    };
    const std::vector<probe> probes{
        {1.0625f, 1.0f, 1.25f},     {1.2f, 1.0f, 1.25f},        {-0x1.4p-15f, -0x1p-15f, -0x1.8p-15f},
        {0x1p-18f, 0.0f, 0x1p-16f}, {0x1p-40f, 0.0f, 0x1p-16f}, {60000.0f, 57344.0f, infinity}};
    const std::size_t n = 1 << 16;
    for (const probe& p : probes) {
        const std::vector<float> got =
            round_trip(std::vector<float>(n, p.x), Dtype::float8_e5m2, 99, 0, Overflow::infinity);
        std::size_t ups = 0;
        for (float v : got) {
            BOOST_TEST((v == p.lo || v == p.hi), "value " << v << " from " << p.x);
            ups += v == p.hi;
        }
        const double hi = std::isinf(p.hi) ? 65536.0 : p.hi; // the step beyond the largest finite
        const double prob = std::floor(std::ldexp((double(p.x) - p.lo) / (hi - p.lo), 32)) * 0x1p-32;
        const double sigma = std::sqrt(n * prob * (1 - prob));
        BOOST_TEST(std::fabs(double(ups) - n * prob) <= 6 * sigma + 1,
                   p.x << ": " << ups << " of " << n << " rounded up, expected " << n * prob);
    }
}

BOOST_AUTO_TEST_CASE(a_draw_equal_to_the_threshold_rounds_down) {
    // In [1, 2) float8_e5m2 keeps 2 of float32's 23 fraction bits, so ⌊frac · 2^32⌋ = (dropped bits) · 2^11.
    // Values whose dropped bits are u / 2^11 (u from the stream) meet their draw exactly: down; one more: up.
    const std::uint64_t key = 21;
    std::vector<float> at, above;
    std::vector<std::uint64_t> where;
    for (std::uint64_t i = 0; i < 200000 && where.size() < 40; ++i) {
        const std::uint32_t u = draw(key, i);
        if (u % 2048 != 0 || u >> 11 >= (1u << 21) - 1) continue;
        where.push_back(i);
        at.push_back(std::bit_cast<float>(0x3F800000u | (u >> 11)));
        above.push_back(std::bit_cast<float>(0x3F800000u | ((u >> 11) + 1)));
    }
    BOOST_TEST_REQUIRE(where.size() >= 20u);
    for (std::size_t j = 0; j < where.size(); ++j) {
        float got[2];
        std::uint8_t bytes[2];
        narrow_stochastic(&at[j], &bytes[0], 1, Dtype::float8_e5m2, key, where[j]);
        narrow_stochastic(&above[j], &bytes[1], 1, Dtype::float8_e5m2, key, where[j]);
        widen(bytes, Dtype::float8_e5m2, got, 2);
        BOOST_TEST(got[0] == std::bit_cast<float>(0x3F800000u | ((std::bit_cast<std::uint32_t>(at[j]) >> 21) << 21)));
        BOOST_TEST(got[1] == got[0] + 0.25f);
    }
}

BOOST_AUTO_TEST_CASE(representable_values_are_kept_and_streams_decide) {
    std::vector<float> exact{0x1p-16f, -0x1.8p-15f, 0x1.8p-16f * 2};
    for (int k = -14; k <= 15; ++k) exact.push_back(std::ldexp(1.75f, k));
    BOOST_TEST(round_trip(exact, Dtype::float8_e5m2, 3, 0, Overflow::infinity) == exact);

    std::vector<float> src(4096);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = 1.0f + float(i % 64) * 0x1p-8f;
    const std::vector<float> a = round_trip(src, Dtype::bfloat16, 11, 0, Overflow::infinity);
    BOOST_TEST(a == round_trip(src, Dtype::bfloat16, 11, 0, Overflow::infinity));
    BOOST_TEST(a != round_trip(src, Dtype::bfloat16, 12, 0, Overflow::infinity));
    // Rounded in two pieces, each told where it starts: the same as in one.
    std::vector<std::uint8_t> bytes(src.size() * 2);
    narrow_stochastic(src.data(), bytes.data(), 1000, Dtype::bfloat16, 11, 0);
    narrow_stochastic(src.data() + 1000, bytes.data() + 2000, src.size() - 1000, Dtype::bfloat16, 11, 1000);
    std::vector<float> pieces(src.size());
    widen(bytes.data(), Dtype::bfloat16, pieces.data(), pieces.size());
    BOOST_TEST(pieces == a);
}

BOOST_AUTO_TEST_CASE(quantize_draws_element_i_from_position_i) {
    std::vector<float> values(10000);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::ldexp(float(i % 97) + 0.3f, -20);
    const Tensor x = Tensor::from_floats(Shape{100, 100}, values);
    const Tensor q = kernels::quantize(x, 4.0f, Dtype::float8_e5m2, Overflow::saturate, 77);
    std::vector<float> scaled(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) scaled[i] = values[i] * 4.0f;
    BOOST_TEST(q.to_floats() == round_trip(scaled, Dtype::float8_e5m2, 77, 0, Overflow::saturate));
    BOOST_TEST(q.to_floats() != kernels::quantize(x, 4.0f, Dtype::float8_e5m2).to_floats());
}

BOOST_AUTO_TEST_CASE(telemetry_counts_the_outcomes) {
    std::vector<float> src{0.0f, -0.0f, infinity, 0x1p-19f, 0x1p-19f, 0x1p-19f, 0x1p-19f, 3e-5f, 1.1f, -1e6f, 1e6f};
    for (int i = 0; i < 200; ++i) src.push_back(0x1p-18f * float(i % 7));
    std::vector<std::uint8_t> bytes(src.size());
    RoundingRecorder recorder({.histogram = true});
    narrow_stochastic(src.data(), bytes.data(), src.size(), Dtype::float8_e5m2, 5, 0);
    std::vector<float> got(src.size());
    widen(bytes.data(), Dtype::float8_e5m2, got.data(), got.size());
    RoundingStats want;
    want.count = src.size();
    for (std::size_t i = 0; i < src.size(); ++i) {
        const float a = std::fabs(src[i]), r = std::fabs(got[i]);
        if (a == 0)
            ++want.zeros;
        else if (!std::isfinite(a))
            ++want.nonfinite;
        else if (r == 0)
            ++want.underflow;
        else if (!std::isfinite(r))
            ++want.overflow;
        else if (r < 0x1p-14f)
            ++want.subnormal;
        if (std::isfinite(a)) want.amax = std::max(want.amax, a);
    }
    RoundingStats total = recorder.total();
    BOOST_TEST(total.exponent_histogram.size() == RoundingStats::histogram_bins);
    BOOST_TEST(total.exponent_histogram[127 - 19] == 4u); // counted before rounding
    total.exponent_histogram.clear();
    BOOST_TEST((total == want));
    BOOST_TEST(want.underflow > 0u);
    BOOST_TEST(want.subnormal > 0u);
    BOOST_TEST(want.overflow == 2u);
}

#if defined(__x86_64__)
BOOST_AUTO_TEST_CASE(flushing_modes_change_nothing) {
    const std::vector<float> src = sweep();
    for (const format_facts& f : formats()) {
        std::vector<std::uint8_t> plain(src.size() * size_of(f.dtype)), flushed(plain.size());
        narrow_stochastic(src.data(), plain.data(), src.size(), f.dtype, 8, 0, Overflow::saturate);
        const unsigned csr = _mm_getcsr();
        _mm_setcsr(csr | 0x8040u); // FTZ (bit 15) and DAZ (bit 6)
        narrow_stochastic(src.data(), flushed.data(), src.size(), f.dtype, 8, 0, Overflow::saturate);
        _mm_setcsr(csr);
        BOOST_TEST((plain == flushed), name_of(f.dtype));
    }
}
#endif

BOOST_AUTO_TEST_CASE(errors_say_what_is_wrong) {
    float x = 1.0f, y = 0.0f;
    BOOST_CHECK_EXCEPTION(
        narrow_stochastic(&x, &y, 1, Dtype::float32, 0, 0), std::invalid_argument,
        [](const std::invalid_argument& e) { return std::string(e.what()).find("float32") != std::string::npos; });
    BOOST_CHECK_THROW(narrow_stochastic(nullptr, &y, 1, Dtype::float16, 0, 0), std::invalid_argument);
    narrow_stochastic(nullptr, nullptr, 0, Dtype::float16, 0, 0); // nothing to do
}
