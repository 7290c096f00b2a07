#pragma once
/// OCP Microscaling (MX v1.0) block quantization with FP8 elements: MXFP8 with float8_e4m3 or float8_e5m2.
///
/// A block is k = 32 consecutive values V_i of a row (the last block of a row may be shorter; it is a block
/// of its own). It is stored as one shared scale X = 2^shared_exp in E8M0 and one element P_i per value:
///
///   shared_exp = clamp(floor(log2(amax)) - emax_elem, -127)     amax = max_i |V_i|
///   P_i        = round(V_i / X) in the element format: nearest, ties to even, saturating (a magnitude
///                beyond the largest normal becomes ± the largest normal), subnormals kept
///   value_i    = X * decode(P_i)                                   (NaN for every i when X is NaN)
///
/// | element     | emax_elem | largest normal    | E8M0 bits reachable from finite float32 |
/// |-------------|-----------|-------------------|-----------------------------------------|
/// | float8_e4m3 | 8         | 448 = 1.75 * 2^8  | 0 (clamped) .. 246                      |
/// | float8_e5m2 | 15        | 57344 = 1.75*2^15 | 0 (clamped) .. 239                      |
///
/// E8M0 is an unsigned biased exponent: bits b mean 2^(b - 127), b = 0xFF is NaN; it has no zero and no
/// sign. Some blocks of float8_e4m3:
///
/// | amax                      | floor(log2 amax) | scale bits | X      | the amax is stored as     |
/// |---------------------------|------------------|------------|--------|---------------------------|
/// | 448                       | 8                | 127        | 1      | 448                       |
/// | 0x1.fffffep+8 (511.99997) | 8                | 127        | 1      | 448 (saturated)           |
/// | 1                         | 0                | 119        | 2^-8   | 256 * X                   |
/// | 0, or any amax < 2^-118   | ≤ -119 (clamped) | 0          | 2^-127 | V_i / 2^-127, rounded     |
/// | any ±inf or NaN in block  | -                | 0xFF (NaN) | NaN    | every value decodes NaN   |
///
/// floor(log2(amax)) is the exact exponent of amax, read from its float32 bits (float32 subnormals
/// included), and a block of zeros is given exponent -126 (as if amax were 2^-126); both then clamp to
/// scale bits 0. The scale cannot exceed 2^(127 - emax_elem) for finite float32, so the overflow case of
/// the rule (shared_exp > 127 gives a NaN scale) never arises. Any ±inf or NaN in a block makes its scale
/// NaN, and its elements are stored as the element format's quiet NaN (0x7F for e4m3, 0x7E for e5m2).
///
/// V_i / X and X * decode(P_i) are exact (V_i / X is rounded only below 2^-126, where both element
/// formats give ±0 anyway), independent of MXCSR's flush-to-zero and denormals-are-zero modes, and the
/// same on every CPU: mx_quantize and mx_dequantize use integer exponent arithmetic; mx_round and
/// mx_round_columns multiply by normal powers of two in vector loops where the scale lies in
/// [2^-109, 2^126] (there neither flush mode can change a result) and use the integer path elsewhere.
///
/// Sources and where they differ:
///  - OCP MX v1.0 §6.3 sets X to the largest power of two ≤ amax divided by the largest power of two of the
///    element format, clamps normals that exceed the element's max normal (sign kept), and requires
///    roundTiesToEven to be supported. This is that rule. Those steps do not single out inf or NaN
///    inputs; E8M0 reserves 0xFF for a NaN scale, which makes every value of its block NaN. mixprec gives
///    a block with inf or NaN that scale, as microxcaling does (log2 of an inf amax exceeds 127 and
///    becomes NaN; a NaN amax stays NaN).
///  - microxcaling (mx/mx_ops.py, _shared_exponents and _quantize_mx) computes floor(torch.log2(amax))
///    in float32. Where log2(amax) lies within half a float32 ulp below the integer e + 1, that log2
///    rounds up to e + 1. Rounding as glibc's log2f does, this happens for amax = 0x1.fffffep+e at every
///    e + 1 outside {-1, 0, 1, 2}, and for up to 44 float32 values below 2^(e + 1) once |e + 1| ≥ 64. Its
///    scale is then twice ours: the block keeps one bit less, and an amax above 1.75 * 2^e is not
///    saturated. Its C++/CUDA kernels (mx/cpp/mx.cuh) read the exponent bits and agree with us. It maps
///    amax = 0 to 2^-126 (FP32_MIN_NORMAL) as we do.
///  - microxcaling's default rounding, round="nearest", is ties away from zero (floor(|x| + 0.5) in
///    mx/elemwise_ops.py, rd_away in mx/cpp); its round="even" is ours. Inputs exactly halfway between two
///    elements (after scaling) differ.
///  - microxcaling can flush float32 subnormal inputs (mx_flush_fp32_subnorms, off by default); mixprec
///    keeps them. They matter only in blocks whose scale is clamped near 2^-127.

#include <mixprec/autodiff/tensor/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace mixprec::autodiff {

/// Values per block along a row (OCP MX v1.0's k for MXFP8).
inline constexpr std::size_t mx_block_size = 32;

/// The E8M0 scale bits mean 2^(bits - 127): 2^-127 (a float32 subnormal) .. 2^127; NaN for 0xFF.
float e8m0_value(std::uint8_t bits);

/// The E8M0 bits of the shared scale X of one block (any length; see the file comment). `element` is
/// float8_e4m3 or float8_e5m2; anything else throws std::invalid_argument naming it.
std::uint8_t mx_shared_scale(std::span<const float> block, Dtype element);

/// Quantizes `rows` rows of `cols` values (row-major). Blocks of 32 run along each row, the reduction axis
/// of a product; each row's last block holds the remaining cols % 32 values when that is not 0.
///   src       (rows, cols) float32
///   scales    (rows, ceil(cols / 32)) E8M0 bytes
///   elements  (rows, cols) bytes of `element` (float8_e4m3 or float8_e5m2; else std::invalid_argument)
void mx_quantize(const float* src, std::size_t rows, std::size_t cols, Dtype element, std::uint8_t* scales,
                 std::uint8_t* elements);

/// dst = X * decode(P) for every value, exact (a product beyond float32's range, reachable only from
/// bytes mx_quantize does not write, is ±inf); NaN where X is NaN. Layouts as for mx_quantize.
void mx_dequantize(const std::uint8_t* scales, const std::uint8_t* elements, std::size_t rows, std::size_t cols,
                   Dtype element, float* dst);

/// mx_dequantize(mx_quantize(src)) in one pass: the float32 values (each exact) that a product of MX
/// operands computes with. dst may equal src.
void mx_round(const float* src, std::size_t rows, std::size_t cols, Dtype element, float* dst);

/// mx_round with the blocks running down the columns instead: blocks of 32 consecutive rows of a column
/// (the last block of a column holds the remaining rows % 32), for a product that sums over the rows.
/// Equal to transposing, mx_round, and transposing back. dst may equal src.
void mx_round_columns(const float* src, std::size_t rows, std::size_t cols, Dtype element, float* dst);

} // namespace mixprec::autodiff
