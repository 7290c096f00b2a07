#pragma once
/// 2-D convolution (cross-correlation, as in every deep-learning library) with its gradient.
///
/// Layout NCHW, weights (O, C, kh, kw). Every route keeps the same contract: exact products (every
/// operand dtype multiplies exactly in float32), float32 accumulation, the bias added in float32, and
/// each result rounded once (by mixprec, never by oneDNN) to the inputs' dtype. The backward pass
/// likewise: dx (overlapping patches included), dw and dbias are each summed in float32 and rounded once.
/// The routes add their terms in different orders, so they agree within the contract, not bit for bit.
/// - im2col: one GEMM on an im2col matrix per chunk of the batch (OpenBLAS sgemm on operands widened to
///   float32), chunks keeping the column matrix at about 1 MiB;
/// - im2col_onednn: the same, with oneDNN's sgemm in place of OpenBLAS's;
/// - onednn: oneDNN's convolution primitives, on bfloat16 values as they are at the avx512_bf16 level
///   and above, on float32 values (float16 and bfloat16 widened, exactly) otherwise: from avx512 up a
///   bfloat16 input is widened by the reorder into the primitives' layout, in the same pass.
/// bfloat16 convolutions at the avx512_bf16 level and above multiply their bfloat16 operands in oneDNN on
/// both im2col routes.
/// ConvBackend::automatic takes oneDNN's primitives from the avx2 level up (bfloat16 operands as they are
/// from avx512_bf16, where its dot products give twice the float32 rate) and im2col on OpenBLAS at
/// portable: a rule fixed in advance, so a run gives the same bits at every level from avx512 up (oneDNN's
/// float32 kernels are its avx512_core ones there), and at avx2 and portable each its own (oneDNN's avx2
/// kernels; OpenBLAS, which does not follow MIXPREC_ISA). oneDNN's primitives were the fastest route for the
/// cnn's steps on both AVX-512 CPUs measured (AMD Zen 4, Intel Skylake-SP) and at the avx2 level of the
/// Intel CPUs (Skylake-SP, and the Xeon with AMX with OpenBLAS's AVX2 kernels: 18.4–18.9 ms a float32 step
/// against 24.2–24.8 on im2col, once the first layer's pass ran at avx2); on the one AVX2-only CPU measured
/// (AMD Zen 3, before that pass and the pooling in the convolution's pass) im2col with oneDNN's sgemm led;
/// bench/README.md has the figures. Below avx512 the onednn route runs a first layer's backward pass (one
/// channel, 3 × 3, stride 1, no padding or dilation) on im2col with oneDNN's sgemm, where oneDNN's avx2
/// kernels pad the one channel to eight (detail/conv/routes.hpp).
/// ConvBackend::measured instead times the routes on the CPU at hand and keeps the fastest for each shape
/// (below). bench/bench_layers times every route for every dtype.
/// The input's gradient is computed only when a tape wants it (gradient_needed, tape.hpp), so a first
/// layer fed with data pays for dw and dbias alone.

#include <mixprec/autodiff/ops_fp8.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::autodiff {

/// Which implementation runs a convolution (the result obeys the same contract on each).
enum class ConvBackend : unsigned char {
    automatic,     ///< the process's route (set_conv_backend), by default the fixed rule above
    im2col,        ///< im2col and an OpenBLAS GEMM per chunk of the batch
    im2col_onednn, ///< im2col and a oneDNN GEMM per chunk of the batch
    onednn,        ///< oneDNN's convolution primitives
    /// Each route in turn, once to warm up and three times timed (rounding telemetry paused), at the first
    /// forward pass of each shape and dtype (and again at its first backward pass), keeping the fastest
    /// for the rest of the process:
    /// like cuDNN's benchmark mode. The choice rests on timings, so two runs may choose differently and
    /// then differ in their bits; pin a route where a run must repeat bit for bit (resuming from a
    /// checkpoint included). measured_choices() (tensor/measured.hpp) lists the choices.
    measured,
};

/// "automatic", "im2col", "im2col_onednn", "onednn" or "measured".
std::string_view name_of(ConvBackend backend);
/// The backend of that name; std::invalid_argument naming the choices for any other.
ConvBackend conv_backend_named(std::string_view name);

/// The route ConvBackend::automatic stands for in this process: at first MIXPREC_CONV_ROUTE's (a name
/// above) when that is set, else automatic, which is the fixed rule. set_conv_backend changes it (for
/// every thread; no convolution may run meanwhile).
ConvBackend conv_backend();
void set_conv_backend(ConvBackend backend);

struct Conv2dOptions {
    std::array<std::size_t, 2> stride{1, 1};   ///< (rows, columns), each ≥ 1
    std::array<std::size_t, 2> padding{0, 0};  ///< zeros added on both sides of each spatial axis
    std::array<std::size_t, 2> dilation{1, 1}; ///< spacing of the kernel taps, each ≥ 1
    ConvBackend backend = ConvBackend::automatic;
    /// Apply ReLU (max(v, 0), NaN kept) to each result before its one rounding, and mask the output
    /// gradient by y > 0 on the way back: the bits of relu(conv2d(…)) in one pass fewer each way, with
    /// fewer roundings to count (the ReLU's exact ones are not made).
    bool relu = false;
};

/// y[n,o,i,j] = b[o] + Σ_{c,p,q} w[o,c,p,q] · x[n, c, i·s₀ − p₀ + p·d₀, j·s₁ − p₁ + q·d₁]  (zero outside x)
///   x (N, C, H, W), w (O, C, kh, kw), bias (O) -> y (N, O, Ho, Wo),  Ho = (H + 2p₀ − d₀(kh−1) − 1)/s₀ + 1
/// With cols = im2col(x) (C·kh·kw, N·Ho·Wo) and dY as (O, N·Ho·Wo):
///   y = w·cols + b,  dw = dY·colsᵀ,  dx = col2im(wᵀ·dY) (overlaps summed),  dbias = Σ_{n,i,j} dY
/// shape_error naming the shapes for wrong ranks, mismatched channels or bias, stride or dilation 0,
/// or an input smaller than the dilated kernel; dtype_error unless x, w and bias share a dtype.
Tensor conv2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt,
              Conv2dOptions options = {});

/// conv2d with its products in FP8 and per-tensor scales, as dense_fp8 (ops_fp8.hpp) does a dense layer's:
///
///   q_x = fp8(x s_x), q_w = fp8(w s_w):  y  = (q_w ⊛ q_x) / (s_x s_w) + bias       in x's dtype
///   q_g = fp8(dy s_g):                   dx = col2im(q_wᵀ · q_g) / (s_g s_w)        in x's dtype
///                                        dw = (q_g · colsᵀ(q_x)) / (s_x s_g)        in w's dtype
///                                        dbias = Σ dy                               (from dy, not q_g)
///
/// The FP8 values multiply exactly in float32 and are summed in float32 (on oneDNN's float32 primitives
/// with ConvBackend::onednn, else im2col and sgemm); each sum is multiplied by its 1/(s_a s_b) in float32,
/// the bias added, and each result rounded once. The backward pass reuses q_x and q_w, and gradients pass
/// straight through the casts. `casts` are a dense layer's: input, kernel, output gradient. Errors as
/// conv2d's, and std::invalid_argument for a scale that is not positive and finite.
Tensor conv2d_fp8(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Fp8DenseCasts& casts,
                  Conv2dOptions options = {});

/// max_pool2d(conv2d(x, w, bias, options), {2, 2}): the convolution followed by max pooling in 2×2
/// windows with stride 2, bit for bit (but for a first layer's dw and dbias, below), with its gradient.
/// Each image's convolution is rounded to x's dtype and pooled while it is in cache, and the backward
/// pass builds the convolution's output gradient from the pooled one image by image: on the im2col routes
/// the convolution's output (11 MB in float32 for the cnn's first layer) and its gradient are never
/// written whole, nor read back. On the oneDNN routes the
/// primitive writes the batch's output in its own layout, which the pooling reads once: where a layout
/// keeps channels in blocks of 8 or 16, in place, through the ReLU and the rounding as values are read
/// (float16 rounded in a pass before, by the conversion instructions),
/// else each image reordered out of it; the output gradient goes straight into the layout the backward
/// primitives read. A first layer of one channel by 3 × 3 (stride 1, no padding) on the route that widens
/// its operands to float32 skips even that from the avx512 level up: its forward pass there is mixprec's
/// own, with oneDNN's sums bit for bit, each output rounded to x's dtype in registers (float32, float16 and
/// bfloat16), and stores only the pooled values and their argmax (tensor/detail/conv_first_layer.hpp);
/// conv2d takes the same sums.
/// A first layer (the input's gradient not wanted) of up to 27 taps (3 channels of 3 × 3), stride 1, no
/// dilation and no padding gets dw and dbias straight from the windows: each window's gradient times the
/// inputs under its argmax, one product per tap instead of four with three of them zero, and no output
/// gradient written (detail/pooled_weights.hpp). These are the two ops' products, summed in another fixed
/// order (image by image, 16 lanes of windows folded pairwise, then the images in order: the same bits
/// for any thread count and instruction-set level), so dw and dbias may differ from the two ops' in their
/// last bits, within the bound of a float32 sum; the outputs and dx stay bit for bit. A batch with an
/// input that is not finite takes the two ops' path (0 · ∞ is NaN there).
/// ConvBackend::measured times these fused passes on each route, as choices of their own ("conv2d pooled
/// forward …", "conv2d pooled backward …"). Outputs under 2×2, and dtypes other than float32 while a
/// RoundingRecorder is active (the convolution's output is rounded in pieces that never form a tensor to
/// count), run the two ops in turn. Sequential runs a Conv2D and the MaxPool2D after it this way when nothing else needs the
/// convolution's output (models/training/sequential.hpp).
Tensor conv2d_max_pool(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt,
                       Conv2dOptions options = {});

} // namespace mixprec::autodiff
