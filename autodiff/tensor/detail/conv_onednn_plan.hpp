#pragma once
// Internal: what the oneDNN convolution (conv_onednn.cpp) is built from. A plan holds, for one shape, the
// primitives of the three passes and each operand's plain and primitive layouts (conv_onednn_plan.cpp);
// the forward and data passes can also run a few images at a time on each thread (conv_onednn_chunks.cpp).
// Included from .cpp files only (OpenMP).

#include <mixprec/autodiff/tensor/detail/conv_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/onednn_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace mixprec::autodiff::detail::onednn_conv {

inline dnnl::engine& engine() { return onednn_engine(); }
inline dnnl::stream& stream() { return onednn_stream(); }

/// A user buffer in its plain layout, and the memory a primitive wants for it (the same when the
/// layouts agree, else a reorder to or from a per-plan buffer).
struct operand {
    dnnl::memory::desc user, inner;
    std::optional<dnnl::reorder> to_inner, to_user;
    dnnl::memory buffer; // inner layout, when it differs from user

    operand(const dnnl::memory::desc& u, const dnnl::memory::desc& i, bool input);
    /// The memory to hand the primitive, after reordering an input into it.
    dnnl::memory in(const void* data);
    /// The memory for the primitive to write; flush() reorders it into data.
    dnnl::memory out(void* data);
    void flush(void* data);
};

// ---- layouts of a batch, image by image

/// Bytes from one image of `batch` to the next, when its layout keeps each image whole and dense, one after
/// another (the batch dimension outermost), else 0.
std::size_t image_bytes(const dnnl::memory::desc& batch);
/// The first `images` images of `batch`, as a memory of their own.
dnnl::memory::desc first_images(const dnnl::memory::desc& batch, std::size_t images);
/// The channels' block of a layout of a batch (conv_kernels.hpp): 16 or 8 for oneDNN's aBcd16b and
/// aBcd8b, the channel count for channels last (acdb) when it is a multiple of 16, else 0.
std::size_t channel_block(const dnnl::memory::desc& batch);
/// Whether images can be reordered one by one between these layouts of a batch.
bool by_image(const dnnl::memory::desc& a, const dnnl::memory::desc& b);

/// Image n of a batch at `data` whose images are `step` bytes apart.
inline std::byte* image_at(void* data, std::size_t n, std::size_t step) {
    return static_cast<std::byte*>(data) + n * step;
}

/// A reorder of one image of a batch between two layouts of it that keep images whole (image_bytes), for
/// the threads of a team to run on the images they own while those are in their cache.
struct image_reorder {
    dnnl::memory::desc from, to;
    std::size_t from_step, to_step; // bytes from one image to the next in each batch layout
    dnnl::reorder run;
    image_reorder(const dnnl::memory::desc& from_batch, const dnnl::memory::desc& to_batch);
    /// On this thread: oneDNN runs serially inside a parallel region.
    void operator()(const void* image, void* into) const;
};

/// The per-image reorder between two layouts of a batch, made on first use.
const image_reorder& cached(std::optional<image_reorder>& r, const dnnl::memory::desc& from,
                            const dnnl::memory::desc& to);

/// Runs image(n) for every image of a batch of `images`, each of `per_image` values, on the threads of
/// a team.
template <class Image>
void each_image(std::size_t images, std::size_t per_image, Image image) {
    split_blocks(images, per_image, [&](std::size_t first, std::size_t end) {
        for (std::size_t n = first; n < end; ++n) image(n);
    });
}

/// This thread's scratch of at least `bytes`, in float32 elements (slot 0, 1 or 2), 64-byte aligned.
float* scratch(std::size_t slot, std::size_t bytes);

// ---- plans

/// The passes that run on part of a batch at a time: their results for an image depend on that image
/// alone (the weights pass sums over the batch).
enum class chunk_pass { forward, backward_data };

/// A pass's primitive on part of a batch, run by several threads at once: each hands it a scratchpad of
/// its own.
struct chunk_primitive {
    dnnl::primitive run;
    dnnl::memory::desc scratchpad;
};

struct conv_plan {
    dnnl::convolution_forward::primitive_desc fwd_pd;
    dnnl::convolution_forward fwd;
    std::optional<operand> fx, fw, fy;
    bool has_bias;
    dnnl::memory::desc bias_md;

    // Backward, built on first use.
    bool backward_ready = false;
    dnnl::convolution_backward_data bwd_data;
    dnnl::convolution_backward_weights bwd_weights;
    std::optional<operand> ddy, dw_w, ddx, wx, wdy, wdw;

    std::string bwd_data_impl{}; // oneDNN's name for bwd_data's implementation

    // The per-image reorders of the forward's results, of a backward pass's dy and of dx, made on first use.
    std::optional<image_reorder> y_image{}, dy_image{}, dx_image{};

    // The run whose x fx's buffer holds, reordered (0: none).
    std::uint64_t x_run = 0;

    // The passes over a few images at a time, in the batch's layouts (chunk_primitive_for), by pass and count.
    std::map<std::pair<chunk_pass, std::size_t>, std::optional<chunk_primitive>> chunks{};
};

/// The descriptions a plan's primitives are made from.
struct conv_descs {
    dnnl::memory::desc x, w, b, y;                       // plain float32 user layouts
    dnnl::memory::desc x_any, w_any, y_any, xo, wo, dyo; // what primitives are created with (o: operand type)
    dnnl::memory::dims strides, dilates, pad_l, pad_r;
};
conv_descs descs(const conv_shape& s, bool has_bias);

/// This thread's plan for shape s (made on first use: creation costs far more than a run), with its
/// forward pass; backward_plan() adds the backward passes.
conv_plan& plan(const conv_shape& s, bool has_bias);
conv_plan& backward_plan(const conv_shape& s, bool has_bias);

/// A forward run has just read x through fx: the run's number when it reordered x into fx's buffer (for
/// the weights pass to read there), else 0; kept in p.x_run.
std::uint64_t note_forward_run(conv_plan& p);
/// Runs the forward primitive: its results go to y, or to the plan's buffer when the primitive wants
/// another layout (p.fy->flush(y) then reorders them into y). Returns the run's number when x was
/// reordered into the plan's buffer, else 0.
std::uint64_t run_forward(conv_plan& p, const void* x, const void* w, const float* bias, float* y);
/// dx (plain, float32) from dy and the weights in the data pass's layouts, in one run on the whole batch.
void data_pass(conv_plan& p, const dnnl::memory& dy, const dnnl::memory& ws, float* dx);
/// The backward passes from dy in the primitives' layouts: dy_data for the data pass (only when dx is
/// wanted), dy_weights for the weights pass (bf16_weights_pass's where it applies, else oneDNN's).
void run_backward(conv_plan& p, const conv_shape& s, const conv_input& x, std::uint64_t forward_run, const void* w,
                  const dnnl::memory& dy_data, const dnnl::memory& dy_weights, float* dx, float* dw, float* db);

// ---- a few images at a time (conv_onednn_chunks.cpp)

/// How many images `pass` of plan p runs at a time (whole chunks of that many, then one at a time), or 0
/// when it cannot run on part of the batch: its input and output in layouts that keep images whole, and
/// primitives for that many images and for one that oneDNN gives the batch primitive's implementation
/// (the same kernel: the same bits for every image).
std::size_t chunk_images(conv_plan& p, const conv_shape& s, chunk_pass pass);

/// Runs `pass` on the batch k images at a time, each thread on its own images (serially: oneDNN runs so
/// inside a parallel region), reading `in` (the pass's input in its primitive's layout) and the weights
/// `ws` (and the bias, forward), and hands each image's float32 results over while they are in the
/// thread's cache: image(n, v, block), as the primitive wrote them when that is channel-blocked (for the
/// data pass, in blocks of 16 or channels last only), else in the plain layout.
void run_in_chunks(conv_plan& p, const conv_shape& s, chunk_pass pass, std::size_t k, const dnnl::memory& in,
                   const dnnl::memory& ws, const float* bias, const conv_image_sink& image);

} // namespace mixprec::autodiff::detail::onednn_conv
