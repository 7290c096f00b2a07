#define BOOST_TEST_MODULE mx
#include <boost/test/unit_test.hpp>

#include <mixprec/autodiff/tensor/dtype.hpp>
#include <mixprec/autodiff/tensor/mx.hpp>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace mixprec::autodiff;

namespace {

// The reference below is written from the formats' definitions in double arithmetic; it calls nothing of
// mixprec but the dtype names.

/// An FP8 format: every one of its 256 codes decoded from sign, exponent and mantissa fields.
struct ref_format {
    Dtype dtype;
    int man_bits = 0;
    int emax = 0;              // exponent of the largest normal
    std::uint8_t max_code = 0; // largest finite magnitude
    std::uint8_t nan_code = 0; // the quiet NaN MX stores for the elements of a block with a NaN scale
    std::array<double, 256> value{};
};

ref_format make_format(Dtype dtype, int exp_bits, int man_bits, int bias, bool has_inf) {
    ref_format f{dtype, man_bits};
    const int all_ones = (1 << exp_bits) - 1, man_ones = (1 << man_bits) - 1;
    for (int code = 0; code < 256; ++code) {
        const int e = (code >> man_bits) & all_ones, m = code & man_ones;
        double v = e == 0 ? std::ldexp(m, 1 - bias - man_bits) : std::ldexp((1 << man_bits) + m, e - bias - man_bits);
        if (has_inf && e == all_ones) v = m == 0 ? INFINITY : NAN;
        if (!has_inf && e == all_ones && m == man_ones) v = NAN;
        f.value[code] = code & 0x80 ? -v : v;
    }
    for (int code = 0; code < 128; ++code)
        if (std::isfinite(f.value[code])) f.max_code = static_cast<std::uint8_t>(code);
    f.emax = std::ilogb(f.value[f.max_code]);
    f.nan_code = has_inf ? static_cast<std::uint8_t>((all_ones << man_bits) | (1 << (man_bits - 1)))
                         : static_cast<std::uint8_t>(0x7f);
    return f;
}

const ref_format& e4m3() {
    static const ref_format f = make_format(Dtype::float8_e4m3, 4, 3, 7, false);
    return f;
}
const ref_format& e5m2() {
    static const ref_format f = make_format(Dtype::float8_e5m2, 5, 2, 15, true);
    return f;
}
const std::array<const ref_format*, 2>& formats() {
    static const std::array<const ref_format*, 2> all{&e4m3(), &e5m2()};
    return all;
}

/// The E8M0 bits of a block's scale: exact floor(log2(amax)) minus emax, clamped at -127; NaN for inf/NaN.
std::uint8_t ref_scale(const float* v, std::size_t n, const ref_format& f) {
    double amax = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (!std::isfinite(v[i])) return 0xFF;
        amax = std::max(amax, std::fabs(double(v[i])));
    }
    const int e = amax == 0 ? -126 : std::ilogb(amax); // a float32 subnormal is a normal double
    return static_cast<std::uint8_t>(std::max(e - f.emax, -127) + 127);
}

/// The code nearest to t among the finite codes of t's sign, ties to the even code: saturates by itself.
std::uint8_t ref_nearest(double t, const ref_format& f) {
    const double a = std::fabs(t);
    int best = 0;
    for (int code = 1; code <= f.max_code; ++code) {
        const double d = std::fabs(a - f.value[code]), best_d = std::fabs(a - f.value[best]);
        if (d < best_d || (d == best_d && code % 2 == 0)) best = code;
    }
    return static_cast<std::uint8_t>(best | (std::signbit(t) ? 0x80 : 0));
}

std::uint8_t ref_element(float v, std::uint8_t scale, const ref_format& f) {
    if (scale == 0xFF) return f.nan_code;
    return ref_nearest(std::ldexp(double(v), 127 - scale), f); // exact in double
}

long inexact_decodes = 0; // X * P not exact in float32 (must stay 0)

float ref_value(std::uint8_t p, std::uint8_t scale, const ref_format& f) {
    if (scale == 0xFF || std::isnan(f.value[p])) return NAN;
    const double d = std::ldexp(f.value[p], scale - 127);
    const float r = static_cast<float>(d);
    if (std::fabs(d) <= FLT_MAX && double(r) != d) ++inexact_decodes;
    return r;
}

struct mx_data {
    std::vector<std::uint8_t> scales, elements;
    std::vector<float> values;
};

mx_data ref_quantize(const std::vector<float>& src, std::size_t rows, std::size_t cols, const ref_format& f) {
    const std::size_t blocks = (cols + 31) / 32;
    mx_data out{std::vector<std::uint8_t>(rows * blocks), std::vector<std::uint8_t>(rows * cols),
                std::vector<float>(rows * cols)};
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t b = 0; b < blocks; ++b) {
            const std::size_t at = r * cols + 32 * b, n = std::min<std::size_t>(32, cols - 32 * b);
            const std::uint8_t scale = out.scales[r * blocks + b] = ref_scale(&src[at], n, f);
            for (std::size_t i = at; i < at + n; ++i) {
                out.elements[i] = ref_element(src[i], scale, f);
                out.values[i] = ref_value(out.elements[i], scale, f);
            }
        }
    return out;
}

mx_data lib_quantize(const std::vector<float>& src, std::size_t rows, std::size_t cols, Dtype element) {
    mx_data out{std::vector<std::uint8_t>(rows * ((cols + 31) / 32)), std::vector<std::uint8_t>(rows * cols),
                std::vector<float>(rows * cols)};
    mx_quantize(src.data(), rows, cols, element, out.scales.data(), out.elements.data());
    mx_round(src.data(), rows, cols, element, out.values.data());
    return out;
}

/// Counts mismatches; reports the first few, then one summary assertion.
struct mismatches {
    std::string what;
    long count = 0;
    void check(const char* field, std::size_t at, std::uint32_t input, std::uint32_t got, std::uint32_t want) {
        if (got == want) return;
        if (++count <= 5)
            BOOST_ERROR(what << ' ' << field << '[' << at << "]: input 0x" << std::hex << input << " got 0x" << got
                             << " want 0x" << want);
    }
    ~mismatches() { BOOST_TEST(count == 0, what << ": " << count << " mismatches"); }
};

std::uint32_t fbits(float x) { return std::isnan(x) ? 0x7fc00000u : std::bit_cast<std::uint32_t>(x); }

/// Library against reference: scales, elements and values; and dequantize(quantize(x)) == mx_round(x).
mx_data check_against_reference(const std::string& what, const std::vector<float>& src, std::size_t rows,
                                std::size_t cols, const ref_format& f) {
    BOOST_REQUIRE(src.size() == rows * cols);
    const mx_data want = ref_quantize(src, rows, cols, f);
    const mx_data got = lib_quantize(src, rows, cols, f.dtype);
    std::vector<float> decoded(rows * cols);
    mx_dequantize(got.scales.data(), got.elements.data(), rows, cols, f.dtype, decoded.data());
    mismatches bad{what + " [" + std::string(name_of(f.dtype)) + "]"};
    const std::size_t blocks = (cols + 31) / 32;
    for (std::size_t i = 0; i < got.scales.size(); ++i)
        bad.check("scale", i, fbits(src[(i / blocks) * cols + (i % blocks) * 32]), got.scales[i], want.scales[i]);
    for (std::size_t i = 0; i < src.size(); ++i) {
        bad.check("element", i, fbits(src[i]), got.elements[i], want.elements[i]);
        bad.check("value", i, fbits(src[i]), fbits(got.values[i]), fbits(want.values[i]));
        // Bit for bit, NaN payloads included.
        bad.check("round trip", i, fbits(src[i]), std::bit_cast<std::uint32_t>(decoded[i]),
                  std::bit_cast<std::uint32_t>(got.values[i]));
    }
    BOOST_TEST(inexact_decodes == 0);
    return got;
}

float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

/// Blocks of 32: column 0 holds ±amax, columns 1..31 the values (a partly filled last row is padded with 0).
std::vector<float> blocks_with_amax(const std::vector<float>& values, float amax, std::size_t& rows) {
    rows = (values.size() + 30) / 31;
    std::vector<float> out(rows * 32, 0.0f);
    for (std::size_t r = 0; r < rows; ++r) out[r * 32] = r % 2 ? -amax : amax;
    for (std::size_t i = 0; i < values.size(); ++i) out[(i / 31) * 32 + 1 + i % 31] = values[i];
    return out;
}

/// Every finite float32 whose top 16 bits take each of their 65536 values, low bits 0 and 0x9e37.
const std::vector<float>& top16_sweep() {
    static const std::vector<float> values = [] {
        std::vector<float> v;
        for (std::uint32_t hi = 0; hi < 65536; ++hi)
            for (std::uint32_t lo : {0x0000u, 0x9e37u}) {
                const float x = from_bits(hi << 16 | lo);
                if (std::isfinite(x)) v.push_back(x);
            }
        return v;
    }();
    return values;
}

/// mx_round_columns of t (rows, cols), out of place and in place, against the reference on t's transpose.
void check_columns(const std::string& what, const std::vector<float>& t, std::size_t rows, std::size_t cols,
                   const ref_format& f) {
    std::vector<float> tt(t.size());
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) tt[c * rows + r] = t[r * cols + c];
    const mx_data want = ref_quantize(tt, cols, rows, f);
    std::vector<float> got(t.size()), in_place(t);
    mx_round_columns(t.data(), rows, cols, f.dtype, got.data());
    mx_round_columns(in_place.data(), rows, cols, f.dtype, in_place.data());
    mismatches bad{what + " [" + std::string(name_of(f.dtype)) + "]"};
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
            const std::size_t i = r * cols + c;
            bad.check("value", i, fbits(t[i]), fbits(got[i]), fbits(want.values[c * rows + r]));
            bad.check("in place", i, fbits(t[i]), fbits(in_place[i]), fbits(got[i]));
        }
}

/// (rows, cols) row-major values transposed.
std::vector<float> transpose(const std::vector<float>& t, std::size_t rows, std::size_t cols) {
    std::vector<float> out(t.size());
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) out[c * rows + r] = t[r * cols + c];
    return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(reference_formats_match_their_definitions) {
    BOOST_TEST(e4m3().emax == 8);
    BOOST_TEST(e4m3().value[e4m3().max_code] == 448.0);
    BOOST_TEST(e4m3().value[1] == std::ldexp(1.0, -9));
    BOOST_TEST(e5m2().emax == 15);
    BOOST_TEST(e5m2().value[e5m2().max_code] == 57344.0);
    BOOST_TEST(e5m2().value[1] == std::ldexp(1.0, -16));
    BOOST_TEST(std::isinf(e5m2().value[0x7c]));
    BOOST_TEST(std::isnan(e4m3().value[0x7f]));
    BOOST_TEST(std::isnan(e4m3().value[0xff]));
    BOOST_TEST(e4m3().value[0x7e] == 448.0); // S.1111.110 is a number in e4m3
}

BOOST_AUTO_TEST_CASE(e8m0_values) {
    for (int b = 0; b < 255; ++b)
        BOOST_TEST(double(e8m0_value(std::uint8_t(b))) == std::ldexp(1.0, b - 127), "bits " << b);
    BOOST_TEST(std::isnan(e8m0_value(0xFF)));
}

BOOST_AUTO_TEST_CASE(examples_of_the_header) {
    // float8_e4m3: amax -> scale bits, and what the amax is stored as (element bits and value).
    struct example {
        float amax;
        int scale;
        int element;
        float value;
    };
    for (const example& x : {example{448.0f, 127, 0x7e, 448.0f}, example{0x1.fffffep8f, 127, 0x7e, 448.0f},
                             example{1.0f, 119, 0x78, 1.0f}, example{0x1p-119f, 0, 0x78, 0x1p-119f},
                             example{0x1.fffffep-119f, 0, 0x7e, 0x1.cp-119f}, example{0.0f, 0, 0x00, 0.0f}}) {
        std::uint8_t scale = 0, element = 0;
        float value = 0;
        mx_quantize(&x.amax, 1, 1, Dtype::float8_e4m3, &scale, &element);
        mx_round(&x.amax, 1, 1, Dtype::float8_e4m3, &value);
        BOOST_TEST(int(scale) == x.scale, std::hexfloat << x.amax);
        BOOST_TEST(int(element) == x.element, std::hexfloat << x.amax);
        BOOST_TEST(value == x.value, std::hexfloat << x.amax);
    }
    const float specials[] = {1.0f, INFINITY};
    BOOST_TEST(int(mx_shared_scale(specials, Dtype::float8_e4m3)) == 0xFF);
}

BOOST_AUTO_TEST_CASE(every_top16_pattern_against_fixed_amax) {
    // Each amax places the swept values differently relative to the scale: saturating, normal, subnormal
    // and underflowing elements, clamped scales, and amax just below a power of two.
    const std::vector<float> amaxes{0.0f,          0x1p-149f,      0x1p-127f,      0x1p-126f, 0x1.fffffep-120f,
                                    0x1p-119f,     0x1.fffffep-1f, 1.0f,           0x1.8p0f,  448.0f,
                                    0x1.fffffep8f, 57344.0f,       0x1.fffffep15f, 0x1p100f,  FLT_MAX};
    for (const ref_format* f : formats())
        for (float amax : amaxes) {
            std::size_t rows = 0;
            const std::vector<float> src = blocks_with_amax(top16_sweep(), amax, rows);
            std::ostringstream what;
            what << "top16 sweep, amax " << std::hexfloat << amax;
            check_against_reference(what.str(), src, rows, 32, *f);
        }
}

BOOST_AUTO_TEST_CASE(every_scale_exponent) {
    // amax = 2^k and the largest float32 below 2^(k+1), for every float32 exponent k (subnormals too), with
    // the other 31 values spread below amax; every E8M0 value from the clamped 0 to the largest is reached.
    std::mt19937 rng(7);
    for (const ref_format* f : formats()) {
        std::vector<float> src;
        for (int k = -149; k <= 127; ++k) {
            const float low = std::ldexp(1.0f, k);
            const float high = k == 127 ? FLT_MAX : std::nextafter(std::ldexp(1.0f, k + 1), 0.0f);
            for (float amax : {low, high}) {
                src.push_back(rng() % 2 ? amax : -amax);
                for (int i = 1; i < 32; ++i) {
                    const float fraction = std::ldexp(float(rng() % 4096) / 4096.0f, -int(rng() % 24));
                    src.push_back((rng() % 2 ? -1.0f : 1.0f) * static_cast<float>(double(amax) * fraction));
                }
            }
        }
        const std::size_t rows = src.size() / 32;
        const mx_data got = check_against_reference("scale exponents", src, rows, 32, *f);
        const std::set<int> seen(got.scales.begin(), got.scales.end());
        const int largest = 127 - f->emax + 127;
        BOOST_TEST(seen.size() == std::size_t(largest + 1));
        BOOST_TEST(*seen.begin() == 0);
        BOOST_TEST(*seen.rbegin() == largest);
        // Where a float32 log2 rounds up to k + 1, the exact exponent still gives k.
        long log2_rounds_up = 0;
        for (int k = -100; k <= 126; ++k) {
            const float high = std::nextafter(std::ldexp(1.0f, k + 1), 0.0f);
            const std::vector<float> block{high};
            BOOST_TEST(int(mx_shared_scale(block, f->dtype)) == std::max(k - f->emax, -127) + 127, "k " << k);
            if (std::floor(std::log2(high)) != k) ++log2_rounds_up;
        }
        BOOST_TEST_MESSAGE("float32 log2 rounds 0x1.fffffep+k up for " << log2_rounds_up << " of 227 k");
    }
}

BOOST_AUTO_TEST_CASE(blocks_of_zeros) {
    for (const ref_format* f : formats()) {
        std::vector<float> src(3 * 40, 0.0f);
        for (std::size_t i = 0; i < src.size(); i += 3) src[i] = -0.0f;
        const mx_data got = check_against_reference("zeros", src, 3, 40, *f);
        for (std::uint8_t s : got.scales) BOOST_TEST(int(s) == 0);
        for (std::size_t i = 0; i < src.size(); ++i) BOOST_TEST(std::signbit(got.values[i]) == std::signbit(src[i]));
    }
}

BOOST_AUTO_TEST_CASE(blocks_of_float32_subnormals) {
    // The scale clamps at 2^-127, so subnormal inputs keep up to 22 - 9 (e4m3) or 22 - 16 (e5m2) bits' worth.
    std::vector<float> values;
    for (std::uint32_t m = 1; m < 8192; ++m) values.push_back(from_bits(m));
    for (std::uint32_t m = 8192; m < 0x800000u; m += 61)
        values.push_back(from_bits(m | (m % 3 == 0 ? 0x80000000u : 0)));
    values.resize(values.size() / 32 * 32);
    for (const ref_format* f : formats()) {
        check_against_reference("subnormals", values, values.size() / 32, 32, *f);
        std::size_t rows = 0;
        const std::vector<float> src = blocks_with_amax(values, 0x1p-127f, rows);
        check_against_reference("subnormals under 2^-127", src, rows, 32, *f);
    }
}

BOOST_AUTO_TEST_CASE(blocks_with_inf_and_nan) {
    const std::vector<float> specials{INFINITY, -INFINITY, NAN, -NAN, from_bits(0x7f800001u), from_bits(0xffc12345u)};
    std::mt19937 rng(11);
    for (const ref_format* f : formats())
        for (float special : specials)
            for (std::size_t position : {0, 5, 31}) {
                // Row of three blocks: numbers, numbers with the special, numbers (the last one ragged).
                std::vector<float> src(3 * 32 - 7);
                for (float& x : src) x = std::ldexp(float(rng() % 1000) - 500.0f, int(rng() % 40) - 20);
                src[32 + position] = special;
                const mx_data got = check_against_reference("specials", src, 1, src.size(), *f);
                BOOST_TEST(int(got.scales[1]) == 0xFF);
                for (std::size_t i = 32; i < 64; ++i) BOOST_TEST(std::isnan(got.values[i]));
                BOOST_TEST(int(got.scales[0]) != 0xFF);
                BOOST_TEST(int(got.scales[2]) != 0xFF);
            }
}

BOOST_AUTO_TEST_CASE(ragged_rows) {
    std::mt19937 rng(3);
    for (const ref_format* f : formats())
        for (std::size_t cols : {1, 31, 32, 33, 64, 65, 100})
            for (std::size_t rows : {1, 3}) {
                std::vector<float> src(rows * cols);
                for (float& x : src) {
                    x = from_bits(rng() & 0xbfffffffu); // random sign, mantissa, exponent below 2^1
                    if (rng() % 4 == 0) x = std::ldexp(x, int(rng() % 120));
                }
                check_against_reference("ragged " + std::to_string(rows) + "x" + std::to_string(cols), src, rows, cols,
                                        *f);
            }
}

// Blocks down the columns: each column of the sweep's transpose is one block with a chosen amax (over a
// thousand columns, so the columns are split into runs); ragged column heights and widths; inf and NaN.
BOOST_AUTO_TEST_CASE(columns_against_the_reference) {
    for (const ref_format* f : formats()) {
        for (float amax : {0x1p-127f, 0x1p-110f, 1.0f, 448.0f, 0x1.fffffep15f}) {
            std::size_t rows = 0;
            const std::vector<float> blocks = blocks_with_amax(top16_sweep(), amax, rows);
            std::ostringstream what;
            what << "columns of the top16 sweep, amax " << std::hexfloat << amax;
            check_columns(what.str(), transpose(blocks, rows, 32), 32, rows, *f);
        }
        std::mt19937 rng(5);
        for (std::size_t rows : {1, 31, 32, 33, 65, 100})
            for (std::size_t cols : {1, 7, 1030}) {
                std::vector<float> src(rows * cols);
                for (float& x : src) {
                    x = from_bits(rng() & 0xbfffffffu);
                    if (rng() % 4 == 0) x = std::ldexp(x, int(rng() % 120));
                }
                if (rows > 40) src[37 * cols + cols / 2] = rng() % 2 ? NAN : -INFINITY;
                check_columns("ragged " + std::to_string(rows) + "x" + std::to_string(cols), src, rows, cols, *f);
            }
    }
}

BOOST_AUTO_TEST_CASE(rows_are_independent) {
    for (const ref_format* f : formats()) {
        std::vector<float> big(33), small(33);
        for (std::size_t i = 0; i < 33; ++i) big[i] = 1000.0f * float(i) + 0.25f, small[i] = 1e-30f * float(i);
        std::vector<float> both(big);
        both.insert(both.end(), small.begin(), small.end());
        const mx_data two = lib_quantize(both, 2, 33, f->dtype), a = lib_quantize(big, 1, 33, f->dtype),
                      b = lib_quantize(small, 1, 33, f->dtype);
        BOOST_TEST(std::vector<std::uint8_t>(two.scales.begin(), two.scales.begin() + 2) == a.scales);
        BOOST_TEST(std::vector<std::uint8_t>(two.scales.begin() + 2, two.scales.end()) == b.scales);
        BOOST_TEST(std::vector<std::uint8_t>(two.elements.begin() + 33, two.elements.end()) == b.elements);
        check_against_reference("two rows", both, 2, 33, *f);
    }
}

BOOST_AUTO_TEST_CASE(every_scale_and_element_byte_decodes_exactly) {
    // Rows: the 256 scale bytes; columns: the 256 element bytes, so each row has 8 blocks of one scale.
    std::vector<std::uint8_t> scales(256 * 8), elements(256 * 256);
    for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = std::uint8_t(i / 8);
    for (std::size_t i = 0; i < elements.size(); ++i) elements[i] = std::uint8_t(i % 256);
    for (const ref_format* f : formats()) {
        std::vector<float> got(256 * 256);
        mx_dequantize(scales.data(), elements.data(), 256, 256, f->dtype, got.data());
        mismatches bad{"dequantize every byte [" + std::string(name_of(f->dtype)) + "]"};
        for (std::size_t i = 0; i < got.size(); ++i)
            bad.check("value", i, std::uint32_t(i), fbits(got[i]), fbits(ref_value(elements[i], scales[i / 32], *f)));
        BOOST_TEST(inexact_decodes == 0);
    }
}

BOOST_AUTO_TEST_CASE(in_place_round) {
    for (const ref_format* f : formats()) {
        std::vector<float> src;
        for (std::size_t i = 0; i < 4000; ++i) src.push_back(top16_sweep()[i * 29]);
        const std::vector<float> copy(src);
        mx_round(src.data(), 40, 100, f->dtype, src.data());
        const mx_data want = ref_quantize(copy, 40, 100, *f);
        mismatches bad{"in place [" + std::string(name_of(f->dtype)) + "]"};
        for (std::size_t i = 0; i < src.size(); ++i)
            bad.check("value", i, fbits(copy[i]), fbits(src[i]), fbits(want.values[i]));
    }
}

#if defined(__x86_64__) || defined(_M_X64)
BOOST_AUTO_TEST_CASE(same_bits_with_flush_to_zero_and_denormals_are_zero) {
    // Float32 subnormals in blocks whose amax 2^-126 .. 2^-88 gives scales from clamped (bits 0) to well
    // inside the range: on both sides of the scales mx_round computes with float32 products.
    std::vector<float> values, src;
    for (std::uint32_t m = 1; m < 0x800000u; m += 997) values.push_back(from_bits(m));
    std::size_t rows = 0;
    for (int e = -126; e <= -88; ++e) {
        const std::vector<float> some = blocks_with_amax(values, std::ldexp(1.0f, e), rows);
        src.insert(src.end(), some.begin(), some.end());
    }
    rows = src.size() / 32;
    std::vector<std::uint8_t> scales(256 * 8), elements(256 * 256);
    for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = std::uint8_t(i / 8);
    for (std::size_t i = 0; i < elements.size(); ++i) elements[i] = std::uint8_t(i % 256);
    for (const ref_format* f : formats()) {
        const std::vector<float> columns = transpose(src, rows, 32);
        const auto run = [&] {
            mx_data q = lib_quantize(src, rows, 32, f->dtype);
            std::vector<float> all(256 * 256), down(columns.size());
            mx_dequantize(scales.data(), elements.data(), 256, 256, f->dtype, all.data());
            mx_round_columns(columns.data(), 32, rows, f->dtype, down.data());
            q.values.insert(q.values.end(), all.begin(), all.end());
            q.values.insert(q.values.end(), down.begin(), down.end());
            return q;
        };
        const mx_data plain = run();
        const unsigned csr = _mm_getcsr();
        _mm_setcsr(csr | 0x8040u); // FTZ (bit 15) and DAZ (bit 6)
        const mx_data flushed = run();
        _mm_setcsr(csr);
        BOOST_TEST(plain.scales == flushed.scales);
        BOOST_TEST(plain.elements == flushed.elements);
        mismatches bad{"FTZ/DAZ [" + std::string(name_of(f->dtype)) + "]"};
        for (std::size_t i = 0; i < plain.values.size(); ++i)
            bad.check("value", i, 0, std::bit_cast<std::uint32_t>(flushed.values[i]),
                      std::bit_cast<std::uint32_t>(plain.values[i]));
    }
}
#endif

BOOST_AUTO_TEST_CASE(other_element_dtypes_are_rejected) {
    const std::vector<float> src(32, 1.0f);
    std::vector<std::uint8_t> scales(1), elements(32);
    std::vector<float> dst(32);
    for (Dtype d : {Dtype::float32, Dtype::float16, Dtype::bfloat16, Dtype::cbfloat16}) {
        const std::string name(name_of(d));
        const auto names_it = [&](const std::invalid_argument& e) {
            return std::string(e.what()).find("not " + name) != std::string::npos;
        };
        BOOST_CHECK_EXCEPTION(mx_quantize(src.data(), 1, 32, d, scales.data(), elements.data()), std::invalid_argument,
                              names_it);
        BOOST_CHECK_EXCEPTION(mx_dequantize(scales.data(), elements.data(), 1, 32, d, dst.data()),
                              std::invalid_argument, names_it);
        BOOST_CHECK_EXCEPTION(mx_round(src.data(), 1, 32, d, dst.data()), std::invalid_argument, names_it);
        BOOST_CHECK_EXCEPTION(mx_shared_scale(src, d), std::invalid_argument, names_it);
    }
    BOOST_CHECK_THROW(mx_round(nullptr, 1, 32, Dtype::float8_e4m3, dst.data()), std::invalid_argument);
    mx_round(nullptr, 0, 32, Dtype::float8_e4m3, nullptr); // nothing to do
}
