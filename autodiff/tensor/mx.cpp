#include <mixprec/autodiff/tensor/mx.hpp>

#include <mixprec/autodiff/tensor/format.hpp>

#include <algorithm>
#include <bit>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace mixprec::autodiff {
namespace {

constexpr std::uint32_t sign_bit = 0x80000000u;
constexpr std::uint32_t inf_bits = 0x7f800000u;
constexpr std::uint8_t nan_scale = 0xFF;

/// x * 2^k for finite float32 bits x, rounded to nearest even, by integer arithmetic only.
std::uint32_t times_pow2(std::uint32_t x, int k) {
    const std::uint32_t sign = x & sign_bit;
    std::uint32_t significand = x & 0x7fffffu;
    int e = static_cast<int>((x >> 23) & 0xffu);
    if (e == 0) {
        if (significand == 0) return x;
        const int shift = std::countl_zero(significand) - 8; // normalize a subnormal
        significand <<= shift;
        e = 1 - shift;
    } else {
        significand |= 0x800000u;
    }
    e += k;
    if (e >= 255) return sign | inf_bits;
    if (e >= 1) return sign | (std::uint32_t(e) << 23) | (significand & 0x7fffffu);
    const int r = 1 - e; // the result is a subnormal: shift the significand right by r
    if (r > 25) return sign;
    std::uint32_t q = significand >> r;
    const std::uint32_t rest = significand & ((1u << r) - 1), half = 1u << (r - 1);
    q += rest > half || (rest == half && (q & 1u)) ? 1u : 0u;
    return sign | q; // a carry into bit 23 gives the smallest normal, as it should
}

/// floor(log2(a)) for the bits of a finite, nonzero magnitude.
int exponent_of(std::uint32_t a) {
    const int e = static_cast<int>(a >> 23);
    return e != 0 ? e - 127 : -149 + (31 - std::countl_zero(a));
}

template <class S>
constexpr int emax_elem = static_cast<int>(S::max_code >> S::man_bits) - S::bias;

template <class S>
std::uint8_t shared_scale(const float* v, std::size_t n) {
    std::uint32_t amax = 0;
    for (std::size_t i = 0; i < n; ++i) amax = std::max(amax, std::bit_cast<std::uint32_t>(v[i]) & ~sign_bit);
    if (amax >= inf_bits) return nan_scale;
    const int e = amax == 0 ? -126 : exponent_of(amax);
    return static_cast<std::uint8_t>(std::max(e - emax_elem<S>, -127) + 127);
}

template <class S>
std::uint8_t quantize_one(float v, std::uint8_t scale) {
    if (scale == nan_scale) return S::nan_code;
    // V / X with X = 2^(scale - 127). Exact while |V / X| ≥ 2^-126; below that, times_pow2 rounds once to
    // a float32 subnormal, which both element formats round to ±0 (their smallest subnormal is ≥ 2^-16), so
    // the second rounding in encode cannot change the result.
    const std::uint32_t scaled = times_pow2(std::bit_cast<std::uint32_t>(v), 127 - int(scale));
    return encode<S>(std::bit_cast<float>(scaled), /*saturate=*/true);
}

template <class S>
float dequantize_one(std::uint8_t p, std::uint8_t scale) {
    if (scale == nan_scale) return std::bit_cast<float>(0x7fc00000u);
    const float d = decode<S>(p);
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(d);
    if ((bits & ~sign_bit) >= inf_bits) return d;
    return std::bit_cast<float>(times_pow2(bits, int(scale) - 127)); // exact: ≤ 4 significant bits, ≥ 2^-143
}

/// Calls f(at, n, block) for every block of a (rows, cols) array: its first value, its length, and its
/// scale's position in the (rows, ceil(cols / 32)) scales.
template <class F>
void for_each_block(std::size_t rows, std::size_t cols, F f) {
    std::size_t block = 0;
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; c += mx_block_size)
            f(r * cols + c, std::min(mx_block_size, cols - c), block++);
}

/// Calls f(S{}) with the format spec of an MX element dtype.
template <class F>
void with_element(Dtype element, F&& f) {
    switch (element) {
    case Dtype::float8_e4m3:
        return f(float8_e4m3::spec{});
    case Dtype::float8_e5m2:
        return f(float8_e5m2::spec{});
    default:
        throw std::invalid_argument("mx: element dtype must be float8_e4m3 or float8_e5m2, not " +
                                    std::string(name_of(element)));
    }
}

void check_buffers(std::size_t rows, std::size_t cols, std::initializer_list<const void*> buffers) {
    if (rows == 0 || cols == 0) return;
    for (const void* b : buffers)
        if (b == nullptr)
            throw std::invalid_argument("mx: null buffer for " + std::to_string(rows) + " x " + std::to_string(cols) +
                                        " values");
}

} // namespace

float e8m0_value(std::uint8_t bits) {
    if (bits == nan_scale) return std::bit_cast<float>(0x7fc00000u);
    return std::bit_cast<float>(bits == 0 ? 0x00400000u : std::uint32_t(bits) << 23);
}

std::uint8_t mx_shared_scale(std::span<const float> block, Dtype element) {
    std::uint8_t scale = 0;
    with_element(element, [&]<class S>(S) { scale = shared_scale<S>(block.data(), block.size()); });
    return scale;
}

void mx_quantize(const float* src, std::size_t rows, std::size_t cols, Dtype element, std::uint8_t* scales,
                 std::uint8_t* elements) {
    with_element(element, [&]<class S>(S) {
        check_buffers(rows, cols, {src, scales, elements});
        for_each_block(rows, cols, [&](std::size_t at, std::size_t n, std::size_t block) {
            const std::uint8_t scale = scales[block] = shared_scale<S>(src + at, n);
            for (std::size_t i = 0; i < n; ++i) elements[at + i] = quantize_one<S>(src[at + i], scale);
        });
    });
}

void mx_dequantize(const std::uint8_t* scales, const std::uint8_t* elements, std::size_t rows, std::size_t cols,
                   Dtype element, float* dst) {
    with_element(element, [&]<class S>(S) {
        check_buffers(rows, cols, {scales, elements, dst});
        for_each_block(rows, cols, [&](std::size_t at, std::size_t n, std::size_t block) {
            for (std::size_t i = 0; i < n; ++i) dst[at + i] = dequantize_one<S>(elements[at + i], scales[block]);
        });
    });
}

void mx_round(const float* src, std::size_t rows, std::size_t cols, Dtype element, float* dst) {
    with_element(element, [&]<class S>(S) {
        check_buffers(rows, cols, {src, dst});
        for_each_block(rows, cols, [&](std::size_t at, std::size_t n, std::size_t) {
            const std::uint8_t scale = shared_scale<S>(src + at, n);
            for (std::size_t i = 0; i < n; ++i)
                dst[at + i] = dequantize_one<S>(quantize_one<S>(src[at + i], scale), scale);
        });
    });
}

} // namespace mixprec::autodiff
