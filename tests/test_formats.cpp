#define BOOST_TEST_MODULE formats
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

using namespace mixprec::autodiff;

namespace {

// ---- Independent reference. It works on values in double (frexp / ldexp / nearbyint), never on
// ---- encode/decode, so a bit trick that is wrong in format.hpp is not repeated here.

/// A format as the reference sees it: 1 sign bit, e exponent bits, m mantissa bits, bias.
struct layout {
    int e, m, bias;
    bool has_inf;
    int width() const { return 1 + e + m; }
    int emin() const { return 1 - bias; }
    std::uint32_t sign_bit() const { return 1u << (e + m); }
    std::uint32_t exp_ones() const { return ((1u << e) - 1) << m; }
    std::uint32_t man_ones() const { return (1u << m) - 1; }
    std::uint32_t nan_bits() const { return has_inf ? exp_ones() | 1u << (m - 1) : exp_ones() | man_ones(); }
    double max_finite() const { // no-inf (e4m3): the top exponent is a binade, but mantissa 1..1 is NaN
        const int top = has_inf ? (1 << e) - 2 : (1 << e) - 1;
        return std::ldexp(has_inf ? 2.0 - std::ldexp(1.0, -m) : 2.0 - std::ldexp(1.0, 1 - m), top - bias);
    }
};

// Written out literally (not read from F::spec), so a wrong spec would be caught too.
template <class F>
layout layout_of() {
    if constexpr (std::is_same_v<F, float16>)
        return {5, 10, 15, true};
    else if constexpr (std::is_same_v<F, bfloat16>)
        return {8, 7, 127, true};
    else if constexpr (std::is_same_v<F, cbfloat16>)
        return {6, 9, 31, true};
    else if constexpr (std::is_same_v<F, float8_e4m3>)
        return {4, 3, 7, false};
    else
        return {5, 2, 15, true};
}

/// Bits of a representable magnitude 0 <= v <= max_finite, fields taken from frexp.
std::uint32_t pack(const layout& f, double v) {
    if (v == 0) return 0;
    int ex;
    std::frexp(v, &ex);
    const int e = ex - 1;                                                               // v in [2^e, 2^(e+1))
    if (e < f.emin()) return static_cast<std::uint32_t>(std::ldexp(v, f.m - f.emin())); // v / 2^(emin-m)
    const auto mant = static_cast<std::uint32_t>(std::ldexp(v, f.m - e) - std::ldexp(1.0, f.m));
    return static_cast<std::uint32_t>(e + f.bias) << f.m | mant;
}

/// Value of a finite pattern from its fields: sign * 2^(e-bias) * (1 + m/2^M), or m * 2^(1-bias-M).
double value_of(const layout& f, std::uint32_t p) {
    const std::uint32_t ef = (p & f.exp_ones()) >> f.m, mf = p & f.man_ones();
    const double v = ef == 0 ? std::ldexp(double(mf), f.emin() - f.m)
                             : std::ldexp(1.0 + std::ldexp(double(mf), -f.m), int(ef) - f.bias);
    return (p & f.sign_bit()) ? -v : v;
}

struct expected {
    std::uint32_t nearest, saturating; // Overflow::infinity and basic_float::saturating
};

/// Reference float32 -> format: round to nearest, ties to even, on the exact value in double.
expected reference(const layout& f, float x) {
    const std::uint32_t sign = std::signbit(x) ? f.sign_bit() : 0;
    if (std::isnan(x)) { // sign kept, quiet bit set, top M payload bits (e4m3 has a single NaN)
        const std::uint32_t payload = std::bit_cast<std::uint32_t>(x) & 0x7fffffu;
        const std::uint32_t b = sign | (f.has_inf ? f.nan_bits() | payload >> (23 - f.m) : f.nan_bits());
        return {b, b};
    }
    const double max = f.max_finite(), a = std::fabs(double(x));
    const expected overflow{sign | (f.has_inf ? f.exp_ones() : f.nan_bits()), sign | pack(f, max)};
    if (std::isinf(a)) return overflow;
    if (a == 0) return {sign, sign};
    int ex;
    std::frexp(a, &ex);
    const double q = std::ldexp(1.0, std::max(ex - 1, f.emin()) - f.m); // the quantum at a
    const double v = std::nearbyint(a / q) * q; // a / q is exact; the default mode is ties-to-even
    if (v > max) return overflow;
    return {sign | pack(f, v), sign | pack(f, v)};
}

std::uint32_t fbits(float x) { return std::bit_cast<std::uint32_t>(x); }
float from_fbits(std::uint32_t b) { return std::bit_cast<float>(b); }

/// Counts mismatches; reports the first few with their bits, then one summary assertion.
struct mismatches {
    std::string what;
    long count = 0;
    void check(std::uint32_t input, std::uint32_t got, std::uint32_t want, const char* mode = "") {
        if (got == want) return;
        if (++count <= 5)
            BOOST_ERROR(what << mode << ": input 0x" << std::hex << input << " got 0x" << got << " want 0x" << want);
    }
    ~mismatches() { BOOST_TEST(count == 0, what << ": " << count << " mismatches"); }
};

/// Encodes x both ways and compares with the reference and, if given, with explicit bits.
template <class F>
void check_encode(mismatches& log, float x, expected want) {
    log.check(fbits(x), F(x).bits(), want.nearest, " [infinity]");
    log.check(fbits(x), F::saturating(x).bits(), want.saturating, " [saturate]");
    const expected ref = reference(layout_of<F>(), x);
    log.check(fbits(x), ref.nearest, want.nearest, " [reference vs explicit]");
    log.check(fbits(x), ref.saturating, want.saturating, " [reference vs explicit, saturate]");
}

template <class F>
void check_all_patterns() {
    const layout f = layout_of<F>();
    const std::string name(name_of(dtype_of<F>));
    mismatches decoded{name + " decode vs field value"}, round_trip{name + " encode(decode(p))"},
        ref_trip{name + " reference(decode(p))"};
    for (std::uint32_t p = 0; p < (1u << f.width()); ++p) {
        const auto bits = static_cast<typename F::storage>(p);
        const float x = float(F::from_bits(bits));
        const bool is_nan = (p & f.exp_ones()) == f.exp_ones() &&
                            (f.has_inf ? (p & f.man_ones()) != 0 : (p & f.man_ones()) == f.man_ones());
        const bool is_inf = f.has_inf && (p & ~f.sign_bit()) == f.exp_ones();
        const std::uint32_t fsign = (p & f.sign_bit()) ? 0x80000000u : 0u;
        std::uint32_t want = fbits(float(value_of(f, p))); // exact: every value fits float32
        if (is_inf) want = fsign | 0x7f800000u;
        if (is_nan) // quiet, payload moved to the top of the float mantissa; e4m3's only NaN has no payload
            want = fsign | 0x7fc00000u | (f.has_inf ? (p & f.man_ones()) << (23 - f.m) : 0u);
        decoded.check(p, fbits(x), want);
        // A signalling NaN comes back quiet (as vcvtph2ps does); every other pattern comes back unchanged.
        const std::uint32_t back = is_nan ? p | (f.has_inf ? 1u << (f.m - 1) : 0u) : p;
        round_trip.check(p, F(x).bits(), back, " [infinity]");
        round_trip.check(p, F::saturating(x).bits(), is_inf ? (p & f.sign_bit()) | pack(f, f.max_finite()) : back,
                         " [saturate]");
        ref_trip.check(p, reference(f, x).nearest, back); // validates the reference on every representable
    }
}

/// Every midpoint between adjacent representables (and between max and the next power: the overflow
/// threshold), the floats just above and below it, both signs: ties go to the even pattern.
template <class F>
void check_midpoints() {
    const layout f = layout_of<F>();
    const std::uint32_t max_code = pack(f, f.max_finite());
    const std::uint32_t over = f.has_inf ? f.exp_ones() : f.nan_bits();
    mismatches log{std::string(name_of(dtype_of<F>)) + " midpoints"};
    for (std::uint32_t k = 0; k <= max_code; ++k) {
        const double lo = value_of(f, k);
        const double hi = k == max_code ? 2 * lo - value_of(f, k - 1) : value_of(f, k + 1);
        const float mid = float((lo + hi) / 2);
        if (double(mid) != (lo + hi) / 2) BOOST_FAIL("midpoint after pattern " << k << " is not a float32");
        const expected below{k, k}, above{k == max_code ? over : k + 1, k + 1 > max_code ? max_code : k + 1};
        const expected tie = k % 2 == 0 ? below : above;
        for (std::uint32_t sign : {0u, f.sign_bit()}) {
            const float s = sign ? -1.0f : 1.0f;
            const auto sg = [&](expected e) { return expected{e.nearest | sign, e.saturating | sign}; };
            check_encode<F>(log, s * mid, sg(tie));
            check_encode<F>(log, s * std::nextafter(mid, INFINITY), sg(above));
            check_encode<F>(log, s * std::nextafter(mid, 0.0f), sg(below));
        }
    }
}

/// Random floats vs the reference: uniform bit patterns, then values with exponents in the format's range.
template <class F>
void check_random(std::uint32_t seed, long per_kind) {
    const layout f = layout_of<F>();
    std::mt19937 gen(seed);
    int above_max; // max < 2^above_max: exponents run from 12 binades below min to 2 above max's
    std::frexp(f.max_finite(), &above_max);
    std::uniform_int_distribution<int> exponent(f.emin() - 12, above_max + 1);
    mismatches log{std::string(name_of(dtype_of<F>)) + " random floats vs reference"};
    for (long i = 0; i < 2 * per_kind; ++i) {
        float x;
        if (i < per_kind) {
            x = from_fbits(gen());
        } else {
            const std::uint32_t r = gen();
            const double v = std::ldexp(1.0 + std::ldexp(double(r & 0x7fffffu), -23), exponent(gen));
            x = float(r >> 31 ? -v : v);
        }
        const expected want = reference(f, x);
        log.check(fbits(x), F(x).bits(), want.nearest, " [infinity]");
        log.check(fbits(x), F::saturating(x).bits(), want.saturating, " [saturate]");
    }
}

constexpr long random_per_kind = 5'000'000; // uniform bit patterns, then as many in-range values

using all_formats = std::tuple<float16, bfloat16, cbfloat16, float8_e4m3, float8_e5m2>;

} // namespace

// Proves decode is exact for every pattern of every format, and encode(decode(p)) == p (NaN: p | quiet bit).
BOOST_AUTO_TEST_CASE_TEMPLATE(every_pattern_decodes_exactly_and_round_trips, F, all_formats) {
    check_all_patterns<F>();
}

// Proves ties-to-even at every midpoint (incl. subnormals, binade edges, overflow threshold) and
// correct rounding one float away from it, in both overflow modes.
BOOST_AUTO_TEST_CASE_TEMPLATE(every_midpoint_rounds_to_even, F, all_formats) { check_midpoints<F>(); }

// Proves encode equals the independent reference on >= 10 million random floats per format.
BOOST_AUTO_TEST_CASE_TEMPLATE(random_floats_match_reference, F, all_formats) {
    check_random<F>(20240611u + layout_of<F>().width() * 7 + layout_of<F>().m, random_per_kind);
}

// Proves round_trip == decode(encode): for bfloat16 (an integer shortcut) on every high half of a float32
// with the low halves that decide its rounding (0, 1, just below, at and above the tie, all ones) and 16
// random ones; for the other formats on random floats.
BOOST_AUTO_TEST_CASE(round_trip_is_decode_of_encode) {
    std::mt19937 gen(20261128u);
    std::vector<std::uint32_t> lows{0x0000, 0x0001, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff};
    for (int i = 0; i < 16; ++i) lows.push_back(gen() & 0xffffu);
    std::uint64_t wrong = 0;
    std::uint32_t first = 0;
    for (std::uint32_t high = 0; high <= 0xffffu; ++high)
        for (std::uint32_t low : lows) {
            const float x = from_fbits(high << 16 | low);
            const bool same =
                fbits(round_trip<bfloat16::spec>(x)) == fbits(decode<bfloat16::spec>(encode<bfloat16::spec>(x)));
            if (!same && wrong++ == 0) first = fbits(x);
        }
    BOOST_TEST(wrong == 0u, "bfloat16: " << wrong << " patterns differ, the first 0x" << std::hex << first);
    const auto check = [&]<class F>(F) {
        for (int i = 0; i < 1'000'000; ++i) {
            const float x = from_fbits(gen());
            const bool same = fbits(round_trip<typename F::spec>(x)) == fbits(float(F(x)));
            if (!same) BOOST_FAIL(name_of(dtype_of<F>) << ": 0x" << std::hex << fbits(x));
        }
    };
    check(float16{});
    check(cbfloat16{});
    check(float8_e4m3{});
    check(float8_e5m2{});
}

// Key inputs with their bits written out by hand (checked against encode and the reference).
BOOST_AUTO_TEST_CASE(hand_written_boundary_cases) {
    const float inf = INFINITY, nan = NAN;
    const auto b = [](std::uint32_t bits) { return from_fbits(bits); };
    const auto same = [](std::uint32_t bits) { return expected{bits, bits}; };
    mismatches h{"float16"}, bf{"bfloat16"}, cb{"cbfloat16"}, e4{"float8_e4m3"}, e5{"float8_e5m2"};

    check_encode<float16>(h, 1.0f, same(0x3C00));
    check_encode<float16>(h, b(0x3F801000), same(0x3C00)); // 1 + 2^-11: tie, down to even
    check_encode<float16>(h, b(0x3F803000), same(0x3C02)); // 1 + 3*2^-11: tie, up to even
    check_encode<float16>(h, b(0x3F801001), same(0x3C01)); // just above the tie
    check_encode<float16>(h, 65504.0f, same(0x7BFF));
    check_encode<float16>(h, 65520.0f, {0x7C00, 0x7BFF}); // overflow threshold: tie, up to "even" infinity
    check_encode<float16>(h, std::nextafter(65520.0f, 0.0f), same(0x7BFF));
    check_encode<float16>(h, -65520.0f, {0xFC00, 0xFBFF});
    check_encode<float16>(h, 0x1p-24f, same(0x0001)); // smallest subnormal
    check_encode<float16>(h, 0x1p-25f, same(0x0000)); // half of it: tie to even zero
    check_encode<float16>(h, std::nextafter(0x1p-25f, 1.0f), same(0x0001));
    check_encode<float16>(h, -0x1p-25f, same(0x8000));
    check_encode<float16>(h, 0x1.8p-24f, same(0x0002));
    check_encode<float16>(h, 0x1p-14f, same(0x0400));            // smallest normal
    check_encode<float16>(h, 0x1p-14f - 0x1p-24f, same(0x03FF)); // largest subnormal
    check_encode<float16>(h, std::nextafter(0x1p-14f, 0.0f), same(0x0400));
    check_encode<float16>(h, 0.0f, same(0x0000));
    check_encode<float16>(h, -0.0f, same(0x8000));
    check_encode<float16>(h, inf, {0x7C00, 0x7BFF});
    check_encode<float16>(h, -inf, {0xFC00, 0xFBFF});
    check_encode<float16>(h, nan, same(0x7E00));
    check_encode<float16>(h, b(0xFFC00000), same(0xFE00));
    check_encode<float16>(h, b(0x7F800001), same(0x7E00)); // signalling, payload below the kept bits
    check_encode<float16>(h, b(0x7FA00000), same(0x7F00)); // signalling, payload bit kept
    check_encode<float16>(h, b(0x7FBFE000), same(0x7FFF));
    check_encode<float16>(h, b(0x80000001), same(0x8000)); // float32 subnormal

    check_encode<bfloat16>(bf, 1.0f, same(0x3F80));
    check_encode<bfloat16>(bf, b(0x3F808000), same(0x3F80));
    check_encode<bfloat16>(bf, b(0x3F818000), same(0x3F82));
    check_encode<bfloat16>(bf, b(0x3F808001), same(0x3F81));
    check_encode<bfloat16>(bf, 0x1.fep127f, same(0x7F7F));       // largest finite
    check_encode<bfloat16>(bf, b(0x7F7F8000), {0x7F80, 0x7F7F}); // overflow threshold
    check_encode<bfloat16>(bf, b(0x7F7F7FFF), same(0x7F7F));
    check_encode<bfloat16>(bf, std::numeric_limits<float>::max(), {0x7F80, 0x7F7F});
    check_encode<bfloat16>(bf, -inf, {0xFF80, 0xFF7F});
    check_encode<bfloat16>(bf, b(0x00010000), same(0x0001)); // 2^-133, a float32 subnormal: kept
    check_encode<bfloat16>(bf, b(0x00008000), same(0x0000)); // 2^-134: tie to even zero
    check_encode<bfloat16>(bf, b(0x00008001), same(0x0001));
    check_encode<bfloat16>(bf, b(0x00018000), same(0x0002));
    check_encode<bfloat16>(bf, b(0x80018000), same(0x8002));
    check_encode<bfloat16>(bf, b(0x00000001), same(0x0000));
    check_encode<bfloat16>(bf, b(0x007F0000), same(0x007F)); // largest subnormal
    check_encode<bfloat16>(bf, b(0x007FFFFF), same(0x0080)); // rounds up to the smallest normal
    check_encode<bfloat16>(bf, b(0x7FA00000), same(0x7FE0));
    check_encode<bfloat16>(bf, b(0xFF800001), same(0xFFC0));

    check_encode<cbfloat16>(cb, 1.0f, same(0x3E00));
    check_encode<cbfloat16>(cb, 0x1.ff8p31f, same(0x7DFF)); // largest finite (2 - 2^-9) * 2^31, see limits test
    check_encode<cbfloat16>(cb, 0x1.ffcp31f, {0x7E00, 0x7DFF});
    check_encode<cbfloat16>(cb, std::nextafter(0x1.ffcp31f, 0.0f), same(0x7DFF));
    check_encode<cbfloat16>(cb, 0x1p32f, {0x7E00, 0x7DFF});
    check_encode<cbfloat16>(cb, 0x1p-30f, same(0x0200));
    check_encode<cbfloat16>(cb, 0x1p-39f, same(0x0001));
    check_encode<cbfloat16>(cb, 0x1p-40f, same(0x0000));
    check_encode<cbfloat16>(cb, std::nextafter(0x1p-40f, 1.0f), same(0x0001));
    check_encode<cbfloat16>(cb, 0x1.8p-39f, same(0x0002));
    check_encode<cbfloat16>(cb, nan, same(0x7F00));
    check_encode<cbfloat16>(cb, b(0x00400000), same(0x0000));

    check_encode<float8_e4m3>(e4, 1.0f, same(0x38));
    check_encode<float8_e4m3>(e4, 256.0f, same(0x78)); // exponent field all ones is a number here
    check_encode<float8_e4m3>(e4, 448.0f, same(0x7E));
    check_encode<float8_e4m3>(e4, 432.0f, same(0x7E)); // tie 416|448, up to even
    check_encode<float8_e4m3>(e4, 464.0f, same(0x7E)); // tie 448|480, down to even: still finite
    check_encode<float8_e4m3>(e4, std::nextafter(464.0f, inf), {0x7F, 0x7E});
    check_encode<float8_e4m3>(e4, -480.0f, {0xFF, 0xFE});
    check_encode<float8_e4m3>(e4, inf, {0x7F, 0x7E});
    check_encode<float8_e4m3>(e4, -inf, {0xFF, 0xFE});
    check_encode<float8_e4m3>(e4, 0x1p-9f, same(0x01));
    check_encode<float8_e4m3>(e4, 0x1p-10f, same(0x00));
    check_encode<float8_e4m3>(e4, std::nextafter(0x1p-10f, 1.0f), same(0x01));
    check_encode<float8_e4m3>(e4, 0x1p-6f, same(0x08));
    check_encode<float8_e4m3>(e4, b(0x7FA00000), same(0x7F));
    check_encode<float8_e4m3>(e4, -nan, same(0xFF));

    check_encode<float8_e5m2>(e5, 1.0f, same(0x3C));
    check_encode<float8_e5m2>(e5, 57344.0f, same(0x7B));
    check_encode<float8_e5m2>(e5, 61440.0f, {0x7C, 0x7B});
    check_encode<float8_e5m2>(e5, std::nextafter(61440.0f, 0.0f), same(0x7B));
    check_encode<float8_e5m2>(e5, 0x1p-16f, same(0x01));
    check_encode<float8_e5m2>(e5, 0x1p-17f, same(0x00));
    check_encode<float8_e5m2>(e5, 0x1.8p-16f, same(0x02));
    check_encode<float8_e5m2>(e5, nan, same(0x7E));
    check_encode<float8_e5m2>(e5, b(0x7FA00000), same(0x7F));
    check_encode<float8_e5m2>(e5, b(0xFF800001), same(0xFE));
    check_encode<float8_e5m2>(e5, inf, {0x7C, 0x7B});
}

namespace {
template <class F>
void check_limits(float max, float min, float denorm_min, float epsilon, int digits, int max_exponent) {
    using L = std::numeric_limits<F>;
    BOOST_TEST(L::is_specialized);
    BOOST_TEST(float(L::max()) == max);
    BOOST_TEST(float(L::lowest()) == -max);
    BOOST_TEST(float(L::min()) == min);
    BOOST_TEST(float(L::denorm_min()) == denorm_min);
    BOOST_TEST(float(L::epsilon()) == epsilon);
    BOOST_TEST(float(L::round_error()) == 0.5f);
    BOOST_TEST(L::digits == digits);
    BOOST_TEST(L::max_exponent == max_exponent); // max < 2^max_exponent
    BOOST_TEST(L::min_exponent == std::ilogb(min) + 1);
    BOOST_TEST(std::isnan(float(L::quiet_NaN())));
    BOOST_TEST(std::isnan(float(L::signaling_NaN())));
    BOOST_TEST(L::has_quiet_NaN);
    BOOST_TEST(L::has_denorm == std::denorm_present);
    if (L::has_infinity)
        BOOST_TEST(float(L::infinity()) == INFINITY);
    else
        BOOST_TEST(std::isnan(float(L::infinity()))); // documented: NaN for a type without infinity
    // the next float16/bfloat16/... value after 1 is 1 + epsilon
    BOOST_TEST(float(F::from_bits(F(1.0f).bits() + 1)) == 1.0f + epsilon);
}
} // namespace

// Proves std::numeric_limits against literal values for every format.
// cbfloat16: 6 exponent bits, bias 31 and an IEEE-style top exponent give emax = 62 - 31 = 31, so the
// largest finite is (2 - 2^-9) * 2^31 = 4290772992 (the "4.29e9" of format.hpp's table); the
// "(2 - 2^-9) * 2^32" in format.hpp's prose is 8.58e9 and does not match the format.
BOOST_AUTO_TEST_CASE(numeric_limits_values) {
    check_limits<float16>(65504.0f, 0x1p-14f, 0x1p-24f, 0x1p-10f, 11, 16);
    check_limits<bfloat16>(0x1.fep127f, 0x1p-126f, 0x1p-133f, 0x1p-7f, 8, 128);
    check_limits<cbfloat16>(0x1.ff8p31f, 0x1p-30f, 0x1p-39f, 0x1p-9f, 10, 32);
    check_limits<float8_e4m3>(448.0f, 0x1p-6f, 0x1p-9f, 0x1p-3f, 4, 9);
    check_limits<float8_e5m2>(57344.0f, 0x1p-14f, 0x1p-16f, 0x1p-2f, 3, 16);
    BOOST_TEST(std::numeric_limits<float16>::has_infinity);
    BOOST_TEST(std::numeric_limits<bfloat16>::has_infinity);
    BOOST_TEST(std::numeric_limits<cbfloat16>::has_infinity);
    BOOST_TEST(!std::numeric_limits<float8_e4m3>::has_infinity);
    BOOST_TEST(std::numeric_limits<float8_e5m2>::has_infinity);
    BOOST_TEST(std::numeric_limits<float16>::is_iec559);
    BOOST_TEST(!std::numeric_limits<bfloat16>::is_iec559);
}
