#include <mixprec/autodiff/tensor/mx.hpp>

#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/format.hpp>

#include <algorithm>
#include <array>
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

/// The scale bits of a block whose largest magnitude has the float32 bits `amax` (inf and NaN bits order
/// above every finite magnitude, so a block holding one has amax ≥ inf_bits).
template <class S>
std::uint8_t scale_of_amax(std::uint32_t amax) {
    if (amax >= inf_bits) return nan_scale;
    const int e = amax == 0 ? -126 : exponent_of(amax);
    return static_cast<std::uint8_t>(std::max(e - emax_elem<S>, -127) + 127);
}

std::uint32_t magnitude_bits(float v) { return std::bit_cast<std::uint32_t>(v) & ~sign_bit; }

template <class S>
std::uint8_t shared_scale(const float* v, std::size_t n) {
    std::uint32_t amax = 0;
    for (std::size_t i = 0; i < n; ++i) amax = std::max(amax, magnitude_bits(v[i]));
    return scale_of_amax<S>(amax);
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

/// Scale bits for which a block is rounded with float32 arithmetic (round_element, in vector loops):
/// V · 2^(127 - bits) and decode(P) · 2^(bits - 127) are then products by normal powers of two,
/// exact but for a product below 2^-126, which is ≤ 2^-17 in magnitude and rounds to ±0 in both element
/// formats whether it is kept, rounded to a subnormal or flushed (MXCSR's FTZ); a float32 subnormal V,
/// which DAZ would read as 0, is then below 2^-126 · 2^109 = 2^-17 after scaling and rounds to ±0 either
/// way. Other blocks (scales below 2^-109, the top scale, NaN) take the integer path.
constexpr std::uint8_t fast_scale_min = 18, fast_scale_max = 253;

/// Values (of a row) or columns (of a band) rounded per pass through the scratch arrays.
constexpr std::size_t run = 1024;

bool fast(std::uint8_t scale) { return scale >= fast_scale_min && scale <= fast_scale_max; }

/// 2^k for a normal float32 power of two.
constexpr float pow2(int k) { return std::bit_cast<float>(std::uint32_t(k + 127) << 23); }

/// 1 / X = 2^(127 - bits), the factor that divides a block by its scale (1 for blocks off the fast path).
float inverse_of(std::uint8_t scale) { return fast(scale) ? pow2(127 - int(scale)) : 1.0f; }

/// X = 2^(bits - 127) for a fast scale.
float value_of(std::uint8_t scale) { return pow2(int(scale) - 127); }

/// The element value nearest x (ties to even, saturating), as a float32, for finite |x| < 2^(emax + 1):
/// the arithmetic of a block on the fast path, with no conversion to and from FP8 bytes. A normal element
/// keeps man_bits of x's mantissa, rounded by integer arithmetic on its bits (a carry moves into the
/// exponent, as it should); a subnormal one is a multiple of q = 2^(emin - man_bits), which the float32
/// sum |x| + 2^(23) q rounds |x| to (spacing q there). Results are 0 or at least q ≥ 2^-16: normal float32
/// values, whatever MXCSR's flush modes.
template <class S>
float round_element(float x) {
    constexpr int drop = 23 - S::man_bits, emin = 1 - S::bias;
    constexpr float smallest_normal = pow2(emin), subnormal_shift = pow2(23 + emin - S::man_bits);
    const float largest = decode<S>(static_cast<std::uint8_t>(S::max_code));
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(x), sign = bits & sign_bit, a = bits & ~sign_bit;
    const std::uint32_t normal = (a + ((1u << (drop - 1)) - 1) + ((a >> drop) & 1u)) & ~((1u << drop) - 1);
    const float magnitude = std::bit_cast<float>(a);
    const float subnormal = (magnitude + subnormal_shift) - subnormal_shift;
    const float rounded = std::min(magnitude < smallest_normal ? subnormal : std::bit_cast<float>(normal), largest);
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(rounded) | sign);
}

/// mx_round of n ≤ `run` values of one row starting at a block boundary. dst may equal src.
template <class S>
void round_run(const float* src, std::size_t n, float* dst) {
    std::array<float, run> scaled;
    std::array<std::uint8_t, run / mx_block_size> scale;
    for (std::size_t b = 0, at = 0; at < n; ++b, at += mx_block_size) {
        const std::size_t m = std::min(mx_block_size, n - at);
        scale[b] = shared_scale<S>(src + at, m);
        const float inverse = inverse_of(scale[b]);
        for (std::size_t i = 0; i < m; ++i) scaled[at + i] = src[at + i] * inverse;
    }
    for (std::size_t i = 0; i < n; ++i) scaled[i] = round_element<S>(scaled[i]);
    for (std::size_t b = 0, at = 0; at < n; ++b, at += mx_block_size) {
        const std::size_t m = std::min(mx_block_size, n - at);
        if (fast(scale[b])) {
            const float x = value_of(scale[b]);
            for (std::size_t i = 0; i < m; ++i) dst[at + i] = scaled[at + i] * x;
        } else {
            for (std::size_t i = 0; i < m; ++i)
                dst[at + i] = dequantize_one<S>(quantize_one<S>(src[at + i], scale[b]), scale[b]);
        }
    }
}

/// mx_round_columns of a band of h ≤ 32 rows (one block down each column) and the n ≤ `run` columns that
/// start at src and dst, each row `pitch` values long. dst may equal src.
template <class S>
void round_band(const float* src, std::size_t h, std::size_t n, std::size_t pitch, float* dst) {
    std::array<std::uint32_t, run> amax{};
    std::array<std::uint8_t, run> scale;
    std::array<float, run> inverse, x, scaled;
    for (std::size_t r = 0; r < h; ++r)
        for (std::size_t j = 0; j < n; ++j) amax[j] = std::max(amax[j], magnitude_bits(src[r * pitch + j]));
    bool all_fast = true;
    for (std::size_t j = 0; j < n; ++j) {
        scale[j] = scale_of_amax<S>(amax[j]);
        inverse[j] = inverse_of(scale[j]);
        x[j] = fast(scale[j]) ? value_of(scale[j]) : 0.0f;
        all_fast = all_fast && fast(scale[j]);
    }
    for (std::size_t r = 0; r < h; ++r) {
        const float* in = src + r * pitch;
        float* out = dst + r * pitch;
        for (std::size_t j = 0; j < n; ++j) scaled[j] = round_element<S>(in[j] * inverse[j]);
        if (all_fast) {
            for (std::size_t j = 0; j < n; ++j) out[j] = scaled[j] * x[j];
            continue;
        }
        for (std::size_t j = 0; j < n; ++j)
            scaled[j] =
                fast(scale[j]) ? scaled[j] * x[j] : dequantize_one<S>(quantize_one<S>(in[j], scale[j]), scale[j]);
        std::copy_n(scaled.data(), n, out);
    }
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
        detail::vectorized([&] {
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t c = 0; c < cols; c += run)
                    round_run<S>(src + r * cols + c, std::min(run, cols - c), dst + r * cols + c);
        });
    });
}

void mx_round_columns(const float* src, std::size_t rows, std::size_t cols, Dtype element, float* dst) {
    with_element(element, [&]<class S>(S) {
        check_buffers(rows, cols, {src, dst});
        detail::vectorized([&] {
            for (std::size_t r = 0; r < rows; r += mx_block_size)
                for (std::size_t c = 0; c < cols; c += run)
                    round_band<S>(src + r * cols + c, std::min(mx_block_size, rows - r), std::min(run, cols - c), cols,
                                  dst + r * cols + c);
        });
    });
}

} // namespace mixprec::autodiff
