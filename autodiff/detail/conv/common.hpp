#pragma once
// Internal: what every route of the convolution ops (ops_conv.cpp, ops_conv_pool.cpp) works with: this
// thread's scratch, operands as float32, results summed in float32 and rounded once, the fused ReLU, sums
// in lanes, and the gradients a backward pass sums into. Included from .cpp files only (OpenMP).

#include <mixprec/autodiff/detail/conv/geometry.hpp>
#include <mixprec/autodiff/detail/lanes.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/grown.hpp>
#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/format.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

namespace mixprec::autodiff::detail::conv {

/// Per-thread scratch reused across calls (large fresh allocations cost a page fault per 4 KiB). Slots
/// 0-3 hold the work buffers of im2col_forward and im2col_backward, 4-6 and 8 widened inputs, 7 one
/// image's float32 result; conv2d_max_pool's 9 an image's pooled values before they are stored (forward)
/// or one plane's pooled gradient (backward), 10 one plane's gradient before it is stored, 11 an image's
/// results rounded.
enum slot : std::size_t {
    widened_x = 4,
    widened_w = 5,
    widened_other = 6,
    image_result = 7,
    widened_y = 8,
    pooled = 9,
    gradient_plane = 10,
    rounded_values = 11
};

template <class T>
T* scratch(std::size_t slot, std::size_t n) {
    thread_local std::array<std::vector<T>, 12> pool;
    return grown(pool[slot], n);
}

/// ReLU as relu() computes it (NaN kept, -0 to +0).
/// The bits kept or cleared by a mask, not a branch: GCC vectorizes every loop that calls it.
inline float relu_of(float v) {
    const std::uint32_t keep = 0u - static_cast<std::uint32_t>((v > 0.0f) | (v != v));
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) & keep);
}

/// The backward pass of a fused ReLU keeps its derivative at the forward's outputs y, as rounded: 1 where
/// y > 0, else 0 (NaN included), in float8_e4m3, one byte an element and exact, instead of y itself (a
/// quarter of y's bytes to read again for float32, and y is not kept alive for it). The gradient is then
/// g · derivative: g where y > 0, else g · 0, the bits of relu()'s gradient.
constexpr std::uint8_t relu_one = float8_e4m3(1.0f).bits();
inline float relu_gradient(float g, bool positive) { return g * (positive ? 1.0f : 0.0f); }

/// Elements [at, at + n) of t as T: t's own when it holds T, else (T is float) widened into this thread's
/// scratch `slot`: the float32 im2col route widens other dtypes image by image, on the thread that works
/// on them; outside a parallel region (a whole tensor for oneDNN's float32 primitives: the cnn's second
/// convolution's bfloat16 input is 2.7 MB widened) every thread widens a part. The bfloat16 route runs on
/// bfloat16 tensors only (data<T>() checks).
template <class T>
const T* elements_as(const Tensor& t, std::size_t at, std::size_t n, std::size_t slot) {
    if constexpr (std::is_same_v<T, float>) {
        if (t.dtype() == Dtype::float32) return static_cast<const float*>(t.raw()) + at;
        float* out = scratch<float>(slot, n);
        const std::byte* from = static_cast<const std::byte*>(t.raw()) + at * size_of(t.dtype());
        const std::size_t width = size_of(t.dtype());
        detail::split(n, std::size_t{1} << 14, [&](std::size_t begin, std::size_t end) {
            widen(from + begin * width, t.dtype(), out + begin, end - begin);
        });
        return out;
    } else {
        return t.data<T>().data() + at;
    }
}

/// t as float32: its own storage when float32, else widened into this thread's scratch `slot`.
inline const float* floats_of(const Tensor& t, std::size_t slot) { return elements_as<float>(t, 0, t.size(), slot); }

/// A zeroed float32 accumulator for a result of shape and dtype; finish() rounds it once.
struct float_result {
    Tensor tensor;
    std::vector<float> wide;
    float* data;
    float_result(const Shape& shape, Dtype dtype) : tensor(shape, dtype) {
        if (dtype == Dtype::float32) {
            data = static_cast<float*>(tensor.raw());
        } else {
            wide.assign(tensor.size(), 0.0f);
            data = wide.data();
        }
    }
    Tensor finish() {
        if (tensor.dtype() != Dtype::float32) narrow(data, tensor.raw(), tensor.size(), tensor.dtype());
        return tensor;
    }
};

/// Float32 values for elements [at, at + n) of t: its own storage for float32, else this thread's
/// scratch, which commit() rounds into t once (one part of `batch`, which records t's whole rounding).
/// Zeroed when `zero` (for accumulating into).
inline float* workspace(Tensor& t, std::size_t at, std::size_t n, bool zero) {
    float* v = t.dtype() == Dtype::float32 ? static_cast<float*>(t.raw()) + at : scratch<float>(image_result, n);
    if (zero) std::fill_n(v, n, 0.0f);
    return v;
}

inline void commit(Tensor& t, std::size_t at, const float* v, std::size_t n, RoundingBatch& batch) {
    if (t.dtype() != Dtype::float32)
        narrow(v, static_cast<std::byte*>(t.raw()) + at * size_of(t.dtype()), n, t.dtype(), batch);
}

/// The ReLU's derivative at y's elements [at, at + n), as rounded, into derivative[at, at + n) (null: not
/// wanted). Run on the thread that has just written those elements, while they are in its cache.
[[gnu::always_inline]] inline void relu_derivative_of(const float* __restrict v, std::uint8_t* __restrict d,
                                                      std::size_t n) {
    // restrict: byte stores may alias anything, and would reload v, d and n on every element
    for (std::size_t i = 0; i < n; ++i) d[i] = v[i] > 0.0f ? relu_one : std::uint8_t{0};
}
inline void relu_derivative(const Tensor& y, std::size_t at, std::size_t n, std::uint8_t* derivative) {
    if (!derivative) return;
    const float* v = elements_as<float>(y, at, n, widened_y);
    detail::vectorized([&] { relu_derivative_of(v, derivative + at, n); });
}

/// The last pass over the oneDNN route's float32 results `wide` (from workspace(t, ...)), on every thread,
/// image by image at the level's vector width: finish(an image's values), then t's elements of that
/// image rounded once from them, and the ReLU's derivative at them into relu_d (null: not wanted). One
/// thread for a whole tensor left the other waiting (the first cnn layer's output is 11 MB in float32).
template <class Finish>
void finish_images(Tensor& t, float* wide, std::size_t images, std::uint8_t* relu_d, Finish finish) {
    const std::size_t per_image = images > 0 ? t.size() / images : 0;
    RoundingBatch rounding(t);
    detail::split_blocks(images, per_image, [&](std::size_t first, std::size_t end) {
        for (std::size_t n = first; n < end; ++n) {
            float* v = wide + n * per_image;
            detail::vectorized([&] { finish(v); });
            commit(t, n * per_image, v, per_image, rounding);
            relu_derivative(t, n * per_image, per_image, relu_d);
        }
    });
}

/// Partial sums of sum_in_lanes: element i of a run goes into sum i mod 16, and the 16 are folded
/// pairwise (8 + 8, 4 + 4, 2 + 2, 1 + 1): one order at every level (a vector of AVX-512, two of AVX2,
/// four of SSE). A single running sum is a chain of dependent additions, one per 4 cycles, that no
/// level can vectorize.
constexpr std::size_t sum_lanes = detail::vector_lanes;

/// The float32 sum of value(i) for i in [0, n), in the order above.
template <class Value>
[[gnu::always_inline]] inline float sum_in_lanes(std::size_t n, Value value) {
    float sums[sum_lanes] = {};
    std::size_t i = 0;
    for (; i + sum_lanes <= n; i += sum_lanes)
        for (std::size_t lane = 0; lane < sum_lanes; ++lane) sums[lane] += value(i + lane);
    for (std::size_t lane = 0; i + lane < n; ++lane) sums[lane] += value(i + lane);
    return detail::fold_lanes(sums);
}

struct conv_grads {
    Tensor* dx;     // (N, C, H, W), or null when not wanted
    float *dw, *db; // (O, C·kh·kw), (O) or null
    float dx_alpha; // dx's sums are multiplied by this before they are rounded
};

/// What a backward pass sums into: dx in dx_dtype (only when the tape wants the input's gradient, not
/// for a batch of data), dw and, with a bias, dbias in dw_dtype; finish() rounds each once.
struct gradient_sums {
    std::optional<Tensor> dx;
    float_result dw;
    std::optional<float_result> db;
    gradient_sums(const geometry& g, const Tensor& x, const Tensor& w, bool bias, Dtype dx_dtype, Dtype dw_dtype)
        : dw(w.shape(), dw_dtype) {
        if (gradient_needed(0)) dx = Tensor::uninitialized(x.shape(), dx_dtype);
        if (bias) db.emplace(Shape{g.o}, dw_dtype);
    }
    gradient_sums(const gradient_sums&) = delete; // dw.data may point into dw itself
    gradient_sums& operator=(const gradient_sums&) = delete;
    conv_grads grads(float dx_alpha) { return {dx ? &*dx : nullptr, dw.data, db ? db->data : nullptr, dx_alpha}; }
    Gradients finish() {
        Gradients result{dx, dw.finish()};
        if (db) result.push_back(db->finish());
        return result;
    }
};

} // namespace mixprec::autodiff::detail::conv
