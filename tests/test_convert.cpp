#define BOOST_TEST_MODULE convert
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

// GCC 12 warns about the deliberately undefined upper lanes inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace mixprec::autodiff;

namespace {

std::uint32_t fbits(float x) { return std::bit_cast<std::uint32_t>(x); }
float from_fbits(std::uint32_t b) { return std::bit_cast<float>(b); }

/// Counts mismatches; reports the first few with their bits, then one summary assertion.
struct mismatches {
    std::string what;
    long count = 0;
    void check(std::uint32_t input, std::uint32_t got, std::uint32_t want) {
        if (got == want) return;
        if (++count <= 5)
            BOOST_ERROR(what << ": input 0x" << std::hex << input << " got 0x" << got << " want 0x" << want);
    }
    ~mismatches() { BOOST_TEST(count == 0, what << ": " << count << " mismatches"); }
};

/// Puts the best path back when a test ends, pass or fail.
struct restore_best_path {
    ~restore_best_path() { set_isa(max_isa()); }
};

const char* overflow_name(Overflow o) { return o == Overflow::saturate ? " [saturate]" : " [infinity]"; }

template <class F>
std::uint32_t scalar_encode(float x, Overflow o) {
    return o == Overflow::saturate ? F::saturating(x).bits() : F(x).bits();
}

template <class F>
std::uint32_t pattern_count() {
    return 1u << (8 * sizeof(typename F::storage));
}

/// Every value of F, every midpoint between neighbours (and between max and the next power), the floats
/// just above and below each midpoint, both signs.
template <class F>
void add_boundaries(std::vector<float>& out) {
    for (std::uint32_t k = 0; k < pattern_count<F>(); ++k) out.push_back(float(F::from_bits(k)));
    const std::uint32_t max_code = std::numeric_limits<F>::max().bits();
    const auto value = [](std::uint32_t k) { return double(float(F::from_bits(k))); };
    for (std::uint32_t k = 0; k <= max_code; ++k) {
        const double lo = value(k), hi = k == max_code ? 2 * lo - value(k - 1) : value(k + 1);
        const float mid = float((lo + hi) / 2);
        for (float m : {mid, std::nextafter(mid, INFINITY), std::nextafter(mid, 0.0f)}) {
            out.push_back(m);
            out.push_back(-m);
        }
    }
}

/// Narrowing inputs shared by the tests: boundaries of every format, float32 specials and subnormals,
/// and 1,048,576 random float bit patterns.
const std::vector<float>& narrow_inputs() {
    static const std::vector<float> inputs = [] {
        std::vector<float> v;
        add_boundaries<float16>(v);
        add_boundaries<bfloat16>(v);
        add_boundaries<cbfloat16>(v);
        add_boundaries<float8_e4m3>(v);
        add_boundaries<float8_e5m2>(v);
        for (std::uint32_t b : {0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fbfffffu, 0x7fffffffu,
                                0x7f7fffffu, 0x00800000u, 0x007fffffu, 0x00000001u, 0x00008000u, 0x00018000u})
            v.insert(v.end(), {from_fbits(b), from_fbits(b | 0x80000000u)});
        std::mt19937 gen(12345);
        for (int i = 0; i < (1 << 20); ++i) v.push_back(from_fbits(gen()));
        return v;
    }();
    return inputs;
}

/// narrow/widen of F on the current path vs scalar encode/decode, on lengths 0..70 with src and dst at
/// element offsets 0, 1, 3 (so vector tails, masks and unaligned loads/stores all run); elements outside
/// [dst, dst + n) must stay untouched (a mismatch there is reported with input 0xffffffff).
template <class F>
void check_tails(const std::string& where) {
    using T = typename F::storage;
    const Dtype d = dtype_of<F>;
    const auto& in = narrow_inputs();
    const T guard = static_cast<T>(0xA5A5);
    const float float_guard = from_fbits(0xDEADBEEFu);
    mismatches narrowed{where + " narrow, lengths 0..70 and offsets"};
    mismatches widened{where + " widen, lengths 0..70 and offsets"};
    std::size_t pos = 0;
    std::mt19937 gen(777);
    for (std::size_t n = 0; n <= 70; ++n)
        for (std::size_t so : {0, 1, 3})
            for (std::size_t dof : {0, 1, 3}) {
                std::vector<float> src(so + n + 3, float_guard);
                for (std::size_t i = 0; i < n; ++i) src[so + i] = in[(pos += 7919) % in.size()];
                for (Overflow o : {Overflow::infinity, Overflow::saturate}) {
                    std::vector<T> dst(dof + n + 20, guard);
                    narrow(src.data() + so, dst.data() + dof, n, d, o);
                    for (std::size_t i = 0; i < dst.size(); ++i) {
                        const bool inside = i >= dof && i < dof + n;
                        narrowed.check(inside ? fbits(src[so + i - dof]) : 0xFFFFFFFFu, dst[i],
                                       inside ? scalar_encode<F>(src[so + i - dof], o) : guard);
                    }
                }
                std::vector<T> bits(so + n + 3, guard);
                for (std::size_t i = 0; i < n; ++i) bits[so + i] = static_cast<T>(gen());
                std::vector<float> out(dof + n + 20, float_guard);
                widen(bits.data() + so, d, out.data() + dof, n);
                for (std::size_t i = 0; i < out.size(); ++i) {
                    const bool inside = i >= dof && i < dof + n;
                    widened.check(inside ? bits[so + i - dof] : 0xFFFFFFFFu, fbits(out[i]),
                                  inside ? fbits(float(F::from_bits(bits[so + i - dof]))) : fbits(float_guard));
                }
            }
}

/// Bulk narrow/widen of F on the current path vs scalar encode/decode on every pattern and every input.
template <class F>
void check_format_on_path(const std::string& path) {
    using T = typename F::storage;
    const std::string where = path + " " + std::string(name_of(dtype_of<F>));
    std::vector<T> patterns(pattern_count<F>());
    std::iota(patterns.begin(), patterns.end(), T(0));
    std::vector<float> wide(patterns.size());
    widen(patterns.data(), dtype_of<F>, wide.data(), patterns.size());
    mismatches widened{where + " widen, all patterns"};
    for (std::size_t i = 0; i < patterns.size(); ++i)
        widened.check(patterns[i], fbits(wide[i]), fbits(float(F::from_bits(patterns[i]))));

    const auto& in = narrow_inputs();
    std::vector<T> narrowed(in.size());
    for (Overflow o : {Overflow::infinity, Overflow::saturate}) {
        narrow(in.data(), narrowed.data(), in.size(), dtype_of<F>, o);
        mismatches log{where + " narrow" + overflow_name(o)};
        for (std::size_t i = 0; i < in.size(); ++i) log.check(fbits(in[i]), narrowed[i], scalar_encode<F>(in[i], o));
    }
    check_tails<F>(where);
}

/// Dtype::float32 is a bit-exact copy both ways, NaN payloads included.
void check_float32_copy(const std::string& path) {
    const auto& in = narrow_inputs();
    std::vector<float> out(in.size() + 1, 0.5f), back(in.size() + 1, 0.5f);
    narrow(in.data(), out.data() + 1, in.size(), Dtype::float32, Overflow::saturate);
    widen(out.data() + 1, Dtype::float32, back.data() + 1, in.size());
    mismatches log{path + " float32 copy"};
    log.check(0, fbits(out[0]), fbits(0.5f));
    for (std::size_t i = 0; i < in.size(); ++i) {
        log.check(fbits(in[i]), fbits(out[i + 1]), fbits(in[i]));
        log.check(fbits(in[i]), fbits(back[i + 1]), fbits(in[i]));
    }
}

/// Calls fn(block of 16 floats) over ~count random float bit patterns, in blocks of 16.
template <class Fn>
void random_blocks(std::uint32_t seed, long count, std::uint32_t mask, Fn fn) {
    std::mt19937 gen(seed);
    alignas(64) float block[16];
    for (long i = 0; i < count; i += 16) {
        for (float& x : block) x = from_fbits(gen() & mask);
        fn(block);
    }
}

/// Calls fn(block of 16 floats) over `in`, the last block padded with zeros.
template <class Fn>
void blocks_of(const std::vector<float>& in, Fn fn) {
    alignas(64) float block[16];
    for (std::size_t i = 0; i < in.size(); i += 16) {
        const std::size_t n = std::min<std::size_t>(16, in.size() - i);
        std::fill(std::begin(block), std::end(block), 0.0f);
        std::copy_n(in.data() + i, n, block);
        fn(block);
    }
}

constexpr long hardware_random_count = 10'000'000;

/// Floats a vector kernel may treat apart from ordinary data: every power of two (float32 subnormal to
/// 2^127), its neighbours and 1.5 times it, F's values next to its extremes, zeros, infinities and NaNs
/// (quiet and signalling, with payloads), all with both signs.
template <class F>
std::vector<float> edge_values() {
    std::vector<float> v;
    for (int e = -149; e <= 127; ++e) {
        const float p = std::ldexp(1.0f, e);
        v.insert(v.end(), {p, std::nextafter(p, 0.0f), std::nextafter(p, INFINITY), 1.5f * p});
    }
    const std::uint32_t max_code = std::numeric_limits<F>::max().bits();
    for (std::uint32_t k : {1u, 2u, 3u, max_code - 1, max_code}) {
        const float x = float(F::from_bits(static_cast<typename F::storage>(k)));
        v.insert(v.end(), {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)});
    }
    for (std::uint32_t b : {0x00000000u, 0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fffffffu, 0x7fc00123u,
                            0x7f7fffffu, 0x00000001u, 0x007fffffu})
        v.push_back(from_fbits(b));
    const std::size_t n = v.size();
    for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
    return v;
}

/// narrow of F on the current path vs scalar encode for each edge value placed alone among ordinary
/// floats, at a different position of a 300-element array each time, so that vector kernels meet it in
/// otherwise unremarkable blocks (where they may take a faster route) as well as in their tails.
template <class F>
void check_edges_among_ordinary(const std::string& path) {
    using T = typename F::storage;
    const auto edges = edge_values<F>();
    std::mt19937 gen(99);
    std::uniform_real_distribution<float> ordinary(-100.0f, 100.0f);
    std::vector<float> in(300);
    std::vector<T> out(in.size());
    for (Overflow o : {Overflow::infinity, Overflow::saturate}) {
        mismatches log{path + " " + std::string(name_of(dtype_of<F>)) + " narrow, one edge value among ordinary ones" +
                       overflow_name(o)};
        for (std::size_t k = 0; k < edges.size(); ++k) {
            for (float& x : in) x = ordinary(gen);
            in[(k * 37) % in.size()] = edges[k];
            narrow(in.data(), out.data(), in.size(), dtype_of<F>, o);
            for (std::size_t i = 0; i < in.size(); ++i) log.check(fbits(in[i]), out[i], scalar_encode<F>(in[i], o));
        }
    }
}

/// MXCSR bits: flush-to-zero, denormals-are-zero, rounding control (round toward zero), and the six
/// exception status flags (which a conversion may leave raised).
constexpr unsigned mxcsr_ftz = 0x8000, mxcsr_daz = 0x0040, mxcsr_round_toward_zero = 0x6000, mxcsr_flags = 0x003f;

/// Sets FTZ, DAZ and round toward zero for its lifetime, as a -ffast-math program that also changed the
/// rounding mode runs; puts MXCSR back when it ends.
struct hostile_mxcsr {
    const unsigned saved = _mm_getcsr();
    const unsigned hostile = saved | mxcsr_ftz | mxcsr_daz | mxcsr_round_toward_zero;
    hostile_mxcsr() { _mm_setcsr(hostile); }
    ~hostile_mxcsr() { _mm_setcsr(saved); }
    hostile_mxcsr(const hostile_mxcsr&) = delete;
    hostile_mxcsr& operator=(const hostile_mxcsr&) = delete;
};

/// Bulk narrow (both overflow modes) and widen of F on the current path, run under hostile_mxcsr, vs
/// scalar encode/decode (integer code, computed afterwards); MXCSR must come back as the caller set it.
template <class F>
void check_format_under_mxcsr(const std::string& path) {
    using T = typename F::storage;
    const std::string where = path + " " + std::string(name_of(dtype_of<F>)) + " under FTZ, DAZ, round toward zero";
    const auto& in = narrow_inputs(); // built before MXCSR changes: making it uses float and double arithmetic
    std::vector<T> patterns(pattern_count<F>());
    std::iota(patterns.begin(), patterns.end(), T(0));
    std::vector<float> wide(patterns.size());
    std::vector<T> to_infinity(in.size()), saturated(in.size());
    unsigned set = 0, after = 0;
    {
        hostile_mxcsr mxcsr;
        set = mxcsr.hostile;
        widen(patterns.data(), dtype_of<F>, wide.data(), patterns.size());
        narrow(in.data(), to_infinity.data(), in.size(), dtype_of<F>, Overflow::infinity);
        narrow(in.data(), saturated.data(), in.size(), dtype_of<F>, Overflow::saturate);
        after = _mm_getcsr();
    }
    BOOST_TEST((after & ~mxcsr_flags) == (set & ~mxcsr_flags), where << ": MXCSR changed by the conversions");
    mismatches widened{where + " widen, all patterns"};
    for (std::size_t i = 0; i < patterns.size(); ++i)
        widened.check(patterns[i], fbits(wide[i]), fbits(float(F::from_bits(patterns[i]))));
    mismatches inf{where + " narrow" + overflow_name(Overflow::infinity)};
    mismatches sat{where + " narrow" + overflow_name(Overflow::saturate)};
    for (std::size_t i = 0; i < in.size(); ++i) {
        inf.check(fbits(in[i]), to_infinity[i], scalar_encode<F>(in[i], Overflow::infinity));
        sat.check(fbits(in[i]), saturated[i], scalar_encode<F>(in[i], Overflow::saturate));
    }
}

/// Runs check(path, format_tag<F>{}) for every format F below float32, at every instruction-set level available
/// (the best path is set again afterwards).
template <class F>
struct format_tag {
    using type = F;
};
template <class Check>
void on_every_path_and_format(Check check) {
    restore_best_path restore;
    for (Isa p : available_isas()) {
        set_isa(p);
        BOOST_TEST((isa() == p));
        const std::string path(name_of(p));
        BOOST_TEST_MESSAGE("checking instruction-set level " << path);
        check(path, format_tag<float16>{});
        check(path, format_tag<bfloat16>{});
        check(path, format_tag<cbfloat16>{});
        check(path, format_tag<float8_e4m3>{});
        check(path, format_tag<float8_e5m2>{});
    }
}

} // namespace

// Proves every level's narrow/widen equals scalar encode/decode bit for bit, for every dtype, both
// overflow modes, all patterns, all boundary inputs, 1M random floats, and every tail/offset shape.
BOOST_AUTO_TEST_CASE(every_path_matches_scalar) {
    restore_best_path restore;
    for (Isa p : available_isas()) {
        set_isa(p);
        check_float32_copy(std::string(name_of(p)));
    }
    on_every_path_and_format(
        [](const std::string& path, auto f) { check_format_on_path<typename decltype(f)::type>(path); });
}

// Proves narrow equals scalar encode on every path when one edge value (power of two, neighbour of a
// format's extremes, infinity, NaN, ...) sits among ordinary floats, wherever in the array it falls.
BOOST_AUTO_TEST_CASE(every_path_handles_edge_values_among_ordinary_ones) {
    on_every_path_and_format(
        [](const std::string& path, auto f) { check_edges_among_ordinary<typename decltype(f)::type>(path); });
}

// Proves the results do not depend on MXCSR: with flush-to-zero, denormals-are-zero and round toward
// zero set (-ffast-math sets the first two process-wide), every path's narrow and widen of every dtype
// still equal scalar encode/decode bit for bit, and MXCSR is as the caller left it.
BOOST_AUTO_TEST_CASE(every_path_ignores_ftz_daz_and_rounding_mode) {
    on_every_path_and_format(
        [](const std::string& path, auto f) { check_format_under_mxcsr<typename decltype(f)::type>(path); });
}

// The CPU's own conversions. Only these functions are compiled for the extra instruction sets, and the
// tests call them only when __builtin_cpu_supports says the CPU has them.
#pragma GCC diagnostic push // GCC 12's intrinsic headers leave the unused upper lanes undefined on purpose
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
[[gnu::target("avx512f")]] void hw_cvtps_ph_512(const float* in, std::uint16_t* out) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
}
[[gnu::target("avx,f16c")]] void hw_cvtps_ph_256(const float* in, std::uint16_t* out) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), h);
}
[[gnu::target("avx512f")]] void hw_cvtph_ps_512(const std::uint16_t* in, float* out) {
    _mm512_storeu_ps(out, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in))));
}
[[gnu::target("avx512f,avx512bf16")]] void hw_cvtneps_pbh(const float* in, std::uint16_t* out) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(in));
    std::memcpy(out, &h, 32);
}
#pragma GCC diagnostic pop

// Proves encode<float16> is exactly vcvtps2ph (512- and 256-bit, round to nearest) on random and
// boundary floats, and decode<float16> is exactly vcvtph2ps on all 65,536 patterns.
BOOST_AUTO_TEST_CASE(float16_matches_vcvtps2ph_and_vcvtph2ps) {
    const bool avx512 = __builtin_cpu_supports("avx512f");
    const bool f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    if (!avx512) BOOST_TEST_MESSAGE("skipped the _mm512_cvtps_ph/_mm512_cvtph_ps checks: no AVX-512F on this CPU");
    if (!f16c) BOOST_TEST_MESSAGE("skipped the _mm256_cvtps_ph check: no F16C on this CPU");
    if (!avx512 && !f16c) return;
    mismatches m512{"float16 encode vs _mm512_cvtps_ph"}, m256{"float16 encode vs _mm256_cvtps_ph"};
    const auto compare = [&](const float* block) {
        alignas(64) std::uint16_t hw512[16], hw256[16];
        if (avx512) hw_cvtps_ph_512(block, hw512);
        if (f16c)
            for (int half = 0; half < 2; ++half) hw_cvtps_ph_256(block + 8 * half, hw256 + 8 * half);
        for (int i = 0; i < 16; ++i) {
            const std::uint32_t mine = float16(block[i]).bits();
            if (avx512) m512.check(fbits(block[i]), mine, hw512[i]);
            if (f16c) m256.check(fbits(block[i]), mine, hw256[i]);
        }
    };
    random_blocks(2024, hardware_random_count, 0xFFFFFFFFu, compare);
    blocks_of(narrow_inputs(), compare);

    if (!avx512) return;
    mismatches widened{"float16 decode vs _mm512_cvtph_ps"};
    alignas(64) std::uint16_t in[16];
    alignas(64) float out[16];
    for (std::uint32_t p = 0; p < 65536; p += 16) {
        std::iota(std::begin(in), std::end(in), static_cast<std::uint16_t>(p));
        hw_cvtph_ps_512(in, out);
        for (int i = 0; i < 16; ++i) widened.check(in[i], fbits(float(float16::from_bits(in[i]))), fbits(out[i]));
    }
}

// Proves encode<bfloat16> is exactly vcvtneps2bf16 except on float32 subnormal inputs, where the
// hardware flushes to ±0 and mixprec keeps the correctly rounded bfloat16 subnormal.
BOOST_AUTO_TEST_CASE(bfloat16_matches_vcvtneps2bf16_except_subnormals) {
    if (!__builtin_cpu_supports("avx512bf16")) {
        BOOST_TEST_MESSAGE("skipped: no AVX512-BF16 (vcvtneps2bf16) on this CPU");
        return;
    }
    mismatches agree{"bfloat16 encode vs _mm512_cvtneps_pbh (normal inputs)"},
        flushed{"_mm512_cvtneps_pbh on float32 subnormals (want signed zero)"},
        kept{"bfloat16 encode on float32 subnormals (want the rounded subnormal)"};
    long subnormals = 0;
    const auto compare = [&](const float* block) {
        alignas(32) std::uint16_t hw[16];
        hw_cvtneps_pbh(block, hw);
        for (int i = 0; i < 16; ++i) {
            const std::uint32_t x = fbits(block[i]), mine = bfloat16(block[i]).bits(), sign = (x >> 16) & 0x8000u;
            if ((x & 0x7f800000u) != 0 || (x & 0x7fffffu) == 0) {
                agree.check(x, mine, hw[i]);
                continue;
            }
            ++subnormals; // bfloat16 subnormals are multiples of 2^-133; 128 * 2^-133 is the smallest normal 0x0080
            const auto units = static_cast<std::uint32_t>(std::nearbyint(std::ldexp(std::fabs(double(block[i])), 133)));
            flushed.check(x, hw[i], sign);
            kept.check(x, mine, sign | units);
        }
    };
    random_blocks(4048, hardware_random_count, 0xFFFFFFFFu, compare);
    random_blocks(4049, 1'000'000, 0x807FFFFFu, compare); // float32 subnormals only
    blocks_of(narrow_inputs(), compare);
    BOOST_TEST(subnormals > 1'000'000);
}

// Proves n == 0 with null (or real) pointers does nothing, and n > 0 with a null pointer throws.
BOOST_AUTO_TEST_CASE(null_pointers_and_empty_ranges) {
    restore_best_path restore;
    for (Isa p : available_isas()) {
        set_isa(p);
        for (int i = 0; i < dtype_count; ++i) {
            const Dtype d = static_cast<Dtype>(i);
            for (Overflow o : {Overflow::infinity, Overflow::saturate}) {
                BOOST_CHECK_NO_THROW(narrow(nullptr, nullptr, 0, d, o));
                unsigned char dst[8] = {1, 2, 3, 4, 5, 6, 7, 8};
                const float src[2] = {1.0f, 2.0f};
                BOOST_CHECK_NO_THROW(narrow(src, dst, 0, d, o));
                BOOST_TEST((dst[0] == 1 && dst[7] == 8), "narrow with n == 0 wrote to dst");
                BOOST_CHECK_THROW(narrow(nullptr, dst, 1, d, o), std::invalid_argument);
                BOOST_CHECK_THROW(narrow(src, nullptr, 1, d, o), std::invalid_argument);
            }
            BOOST_CHECK_NO_THROW(widen(nullptr, d, nullptr, 0));
            const unsigned char src[8] = {};
            float dst[2] = {3.0f, 4.0f};
            BOOST_CHECK_NO_THROW(widen(src, d, dst, 0));
            BOOST_TEST((dst[0] == 3.0f && dst[1] == 4.0f), "widen with n == 0 wrote to dst");
            BOOST_CHECK_THROW(widen(nullptr, d, dst, 1), std::invalid_argument);
            BOOST_CHECK_THROW(widen(src, d, nullptr, 1), std::invalid_argument);
        }
    }
}
