// conv2d through oneDNN's convolution primitives, on float32 or bfloat16 operands. oneDNN always writes
// float32 here; the caller rounds each result once with narrow(), so oneDNN never rounds itself.
//
// The interface is in conv_kernels.hpp.
//
// x, w and dy hold the operand type (NCHW / OIHW); bias, y, dx, dw (OIHW) and db (O, may be null) are
// float32.
#include <mixprec/autodiff/tensor/detail/conv_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/onednn_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace mixprec::autodiff::detail {

namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dim = dnnl::memory::dim;

dnnl::engine& engine() { return onednn_engine(); }
dnnl::stream& stream() { return onednn_stream(); }

/// Let oneDNN choose blocked layouts (with reorders to and from the plain ones) instead of running on
/// nchw / oihw directly.
constexpr bool blocked_layouts = true;

/// A user buffer in its plain layout, and the memory a primitive wants for it (the same when the
/// layouts agree, else a reorder to or from a per-plan buffer).
struct operand {
    dnnl::memory::desc user, inner;
    std::optional<dnnl::reorder> to_inner, to_user;
    dnnl::memory buffer; // inner layout, when it differs from user

    operand(const dnnl::memory::desc& u, const dnnl::memory::desc& i, bool input) : user(u), inner(i) {
        if (user != inner) {
            buffer = dnnl::memory(inner, engine());
            if (input)
                to_inner.emplace(dnnl::reorder::primitive_desc(engine(), user, engine(), inner));
            else
                to_user.emplace(dnnl::reorder::primitive_desc(engine(), inner, engine(), user));
        }
    }

    /// The memory to hand the primitive, after reordering an input into it.
    dnnl::memory in(const void* data) {
        dnnl::memory u(user, engine(), const_cast<void*>(data));
        if (!to_inner) return u;
        to_inner->execute(stream(), u, buffer);
        return buffer;
    }
    /// The memory for the primitive to write; flush() reorders it into data.
    dnnl::memory out(void* data) { return to_user ? buffer : dnnl::memory(user, engine(), data); }
    void flush(void* data) {
        if (!to_user) return;
        dnnl::memory u(user, engine(), data);
        to_user->execute(stream(), buffer, u);
    }
};

/// Bytes from one image of `batch` to the next, when its layout keeps each image whole and dense, one after
/// another (the batch dimension outermost), else 0.
std::size_t image_bytes(const dnnl::memory::desc& batch) {
    const dnnl_memory_desc_t& d = batch.data;
    if (d.format_kind != dnnl_blocked || d.ndims < 1 || d.dims[0] < 1) return 0;
    const auto step =
        static_cast<std::size_t>(d.format_desc.blocking.strides[0]) * dnnl::memory::data_type_size(batch.data_type());
    return step * static_cast<std::size_t>(d.dims[0]) == batch.get_size() ? step : 0;
}

/// The first `images` images of `batch`, as a memory of their own.
dnnl::memory::desc first_images(const dnnl::memory::desc& batch, std::size_t images) {
    dims d = batch.dims();
    d[0] = static_cast<dim>(images);
    return batch.submemory_desc(d, dims(d.size(), 0));
}

/// One image of `batch`, as a memory of its own.
dnnl::memory::desc one_image(const dnnl::memory::desc& batch) { return first_images(batch, 1); }

/// A reorder of one image of a batch between two layouts of it that keep images whole (image_bytes), for
/// the threads of a team to run on the images they own while those are in their cache.
struct image_reorder {
    dnnl::memory::desc from, to;
    std::size_t from_step, to_step; // bytes from one image to the next in each batch layout
    dnnl::reorder run;
    image_reorder(const dnnl::memory::desc& from_batch, const dnnl::memory::desc& to_batch)
        : from(one_image(from_batch)),
          to(one_image(to_batch)),
          from_step(image_bytes(from_batch)),
          to_step(image_bytes(to_batch)),
          run(dnnl::reorder::primitive_desc(engine(), from, engine(), to)) {}
    void operator()(const void* image, void* into) const {
        dnnl::memory a(from, engine(), const_cast<void*>(image)), b(to, engine(), into);
        run.execute(stream(), a, b); // on this thread: oneDNN runs serially inside a parallel region
    }
};

/// Image n of a batch at `data` whose images are `step` bytes apart.
inline std::byte* image_at(void* data, std::size_t n, std::size_t step) {
    return static_cast<std::byte*>(data) + n * step;
}

/// The channels' block of a layout of a batch (conv_kernels.hpp): 16 or 8 for oneDNN's aBcd16b and
/// aBcd8b, else 0.
std::size_t channel_block(const dnnl::memory::desc& batch) {
    if (batch.dims().size() != 4) return 0;
    for (const auto& [block, layout] : {std::pair{16, tag::aBcd16b}, std::pair{8, tag::aBcd8b}})
        if (batch == dnnl::memory::desc(batch.dims(), batch.data_type(), layout)) return block;
    return 0;
}

/// Whether images can be reordered one by one between these layouts of a batch.
bool by_image(const dnnl::memory::desc& a, const dnnl::memory::desc& b) {
    return image_bytes(a) != 0 && image_bytes(b) != 0;
}

/// The per-image reorder between two layouts of a batch, made on first use.
const image_reorder& cached(std::optional<image_reorder>& r, const dnnl::memory::desc& from,
                            const dnnl::memory::desc& to) {
    if (!r) r.emplace(from, to);
    return *r;
}

/// Runs image(n) for every image of a batch of `images`, each of `per_image` values, on the threads of
/// a team.
template <class Image>
void each_image(std::size_t images, std::size_t per_image, Image image) {
    split_blocks(images, per_image, [&](std::size_t first, std::size_t end) {
        for (std::size_t n = first; n < end; ++n) image(n);
    });
}

/// This thread's scratch of at least `bytes`, in float32 elements (slot 0, 1 or 2), 64-byte aligned.
float* scratch(std::size_t slot, std::size_t bytes) {
    constexpr std::size_t align = 64 / sizeof(float);
    thread_local std::array<std::vector<float>, 3> pool;
    const std::size_t n = (bytes + sizeof(float) - 1) / sizeof(float) + align;
    if (pool[slot].size() < n) pool[slot].resize(n);
    const auto at = reinterpret_cast<std::uintptr_t>(pool[slot].data());
    return pool[slot].data() + (align - at / sizeof(float) % align) % align;
}

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

/// A number for each forward run in the process, from 1.
std::uint64_t next_run() {
    static std::atomic<std::uint64_t> runs{0};
    return ++runs;
}

struct conv_descs {
    dnnl::memory::desc x, w, b, y;                       // plain float32 user layouts
    dnnl::memory::desc x_any, w_any, y_any, xo, wo, dyo; // what primitives are created with (o: operand type)
    dims strides, dilates, pad_l, pad_r;
};

dt operand_type(conv_operands t) { return t == conv_operands::bf16 ? dt::bf16 : dt::f32; }

conv_descs descs(const conv_shape& s, bool has_bias) {
    const auto d = [](std::size_t v) { return static_cast<dim>(v); };
    conv_descs r;
    const dims xd{d(s.n), d(s.c), d(s.h), d(s.w)}, wd{d(s.o), d(s.c), d(s.kh), d(s.kw)},
        yd{d(s.n), d(s.o), d(s.ho), d(s.wo)};
    r.x = dnnl::memory::desc(xd, dt::f32, tag::nchw);
    r.w = dnnl::memory::desc(wd, dt::f32, tag::oihw);
    r.y = dnnl::memory::desc(yd, dt::f32, tag::nchw);
    r.b = has_bias ? dnnl::memory::desc({d(s.o)}, dt::f32, tag::x) : dnnl::memory::desc();
    const tag any = blocked_layouts ? tag::any : tag::undef;
    const dt o = operand_type(s.operands);
    r.xo = dnnl::memory::desc(xd, o, blocked_layouts ? any : tag::nchw);
    r.wo = dnnl::memory::desc(wd, o, blocked_layouts ? any : tag::oihw);
    r.dyo = dnnl::memory::desc(yd, o, blocked_layouts ? any : tag::nchw);
    r.x_any = dnnl::memory::desc(xd, dt::f32, blocked_layouts ? any : tag::nchw);
    r.w_any = dnnl::memory::desc(wd, dt::f32, blocked_layouts ? any : tag::oihw);
    r.y_any = dnnl::memory::desc(yd, dt::f32, blocked_layouts ? any : tag::nchw);
    r.strides = {d(s.stride[0]), d(s.stride[1])};
    r.dilates = {d(s.dilation[0]) - 1, d(s.dilation[1]) - 1}; // oneDNN counts the gaps
    r.pad_l = {d(s.padding[0]), d(s.padding[1])};
    r.pad_r = r.pad_l; // our padding is symmetric; oneDNN sizes the output with the same floor division
    return r;
}

/// The plain layout `t` of `f32_plain`'s dimensions, holding the operand type.
dnnl::memory::desc operand_plain(const conv_shape& s, const dnnl::memory::desc& f32_plain, tag t) {
    return dnnl::memory::desc(f32_plain.dims(), operand_type(s.operands), t);
}

conv_plan make_plan(const conv_shape& s, bool has_bias) {
    const conv_descs d = descs(s, has_bias);
    const dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                             d.xo, d.wo, d.b, d.y_any, d.strides, d.dilates, d.pad_l, d.pad_r);
    dnnl::convolution_forward::primitive_desc pd(fd, engine());
    conv_plan p{pd, dnnl::convolution_forward(pd), {}, {}, {}, has_bias, d.b, false, {}, {}, {}, {}, {}, {}, {}, {}, {},
                {}};
    p.fx.emplace(operand_plain(s, d.x, tag::nchw), pd.src_desc(), true);
    p.fw.emplace(operand_plain(s, d.w, tag::oihw), pd.weights_desc(), true);
    p.fy.emplace(d.y, pd.dst_desc(), false);
    return p;
}

void make_backward(conv_plan& p, const conv_shape& s) {
    const conv_descs d = descs(s, p.has_bias);
    const dnnl::convolution_backward_data::desc bdd(dnnl::algorithm::convolution_direct, d.x_any, d.wo, d.dyo,
                                                    d.strides, d.dilates, d.pad_l, d.pad_r);
    const dnnl::convolution_backward_data::primitive_desc bdpd(bdd, engine(), p.fwd_pd);
    const dnnl::convolution_backward_weights::desc bwd =
        p.has_bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.xo, d.w_any, d.b,
                                                              d.dyo, d.strides, d.dilates, d.pad_l, d.pad_r)
                   : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.xo, d.w_any, d.dyo,
                                                              d.strides, d.dilates, d.pad_l, d.pad_r);
    const dnnl::convolution_backward_weights::primitive_desc bwpd(bwd, engine(), p.fwd_pd);
    p.bwd_data = dnnl::convolution_backward_data(bdpd);
    p.bwd_weights = dnnl::convolution_backward_weights(bwpd);
    p.ddy.emplace(operand_plain(s, d.y, tag::nchw), bdpd.diff_dst_desc(), true);
    p.dw_w.emplace(operand_plain(s, d.w, tag::oihw), bdpd.weights_desc(), true);
    p.ddx.emplace(d.x, bdpd.diff_src_desc(), false);
    p.wx.emplace(operand_plain(s, d.x, tag::nchw), bwpd.src_desc(), true);
    p.wdy.emplace(operand_plain(s, d.y, tag::nchw), bwpd.diff_dst_desc(), true);
    p.wdw.emplace(d.w, bwpd.diff_weights_desc(), false);
    p.bwd_data_impl = bdpd.impl_info_str();
    p.backward_ready = true;
}

using key_t = std::array<std::size_t, 17>;

struct key_hash {
    std::size_t operator()(const key_t& k) const noexcept {
        std::size_t h = 0;
        for (std::size_t v : k) h = h * 1000003u ^ v;
        return h;
    }
};

conv_plan& plan(const conv_shape& s, bool has_bias) {
    thread_local std::unordered_map<key_t, conv_plan, key_hash> plans; // creation costs far more than a run
    const key_t key{s.n,
                    s.c,
                    s.h,
                    s.w,
                    s.o,
                    s.kh,
                    s.kw,
                    s.ho,
                    s.wo,
                    s.stride[0],
                    s.stride[1],
                    s.dilation[0],
                    s.dilation[1],
                    s.padding[0],
                    s.padding[1],
                    has_bias ? 1u : 0u,
                    static_cast<std::size_t>(s.operands)};
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, make_plan(s, has_bias)).first;
    return it->second;
}

/// A forward run has just read x through fx: the run's number when it reordered x into fx's buffer (for
/// the weights pass to read there), else 0; kept in p.x_run.
std::uint64_t note_forward_run(conv_plan& p) {
    p.x_run = p.fx->to_inner ? next_run() : 0;
    return p.x_run;
}

/// Runs the forward primitive: its results go to y, or to the plan's buffer when the primitive wants
/// another layout (p.fy->flush(y) then reorders them into y). Returns the run's number when x was
/// reordered into the plan's buffer, else 0.
std::uint64_t run_forward(conv_plan& p, const void* x, const void* w, const float* bias, float* y) {
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, p.fx->in(x)}, {DNNL_ARG_WEIGHTS, p.fw->in(w)}, {DNNL_ARG_DST, p.fy->out(y)}};
    if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias_md, engine(), const_cast<float*>(bias)));
    p.fwd.execute(stream(), args);
    return note_forward_run(p);
}

/// x in the weights pass's layout: the forward's reordered x when that run (forward_run) reordered it
/// into the same layout and no run has overwritten it since, else x reordered again.
dnnl::memory weights_pass_x(conv_plan& p, const void* x, std::uint64_t forward_run) {
    if (forward_run != 0 && forward_run == p.x_run && p.wx->inner == p.fx->inner) return p.fx->buffer;
    return p.wx->in(x);
}

/// dx (plain, float32) from dy and the weights in the data pass's layouts, in one run on the whole batch.
void data_pass(conv_plan& p, const dnnl::memory& dy, const dnnl::memory& ws, float* dx) {
    p.bwd_data.execute(stream(),
                       {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, ws}, {DNNL_ARG_DIFF_SRC, p.ddx->out(dx)}});
    p.ddx->flush(dx);
}

/// The backward passes from dy in the primitives' layouts: dy_data for the data pass (only when dx is
/// wanted), dy_weights for the weights pass.
void run_backward(conv_plan& p, const void* x, std::uint64_t forward_run, const void* w, const dnnl::memory& dy_data,
                  const dnnl::memory& dy_weights, float* dx, float* dw, float* db) {
    if (dx) data_pass(p, dy_data, p.dw_w->in(w), dx);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, weights_pass_x(p, x, forward_run)},
                                               {DNNL_ARG_DIFF_DST, dy_weights},
                                               {DNNL_ARG_DIFF_WEIGHTS, p.wdw->out(dw)}};
    if (db) args.emplace(DNNL_ARG_DIFF_BIAS, dnnl::memory(p.bias_md, engine(), db));
    p.bwd_weights.execute(stream(), args);
    p.wdw->flush(dw);
    stream().wait();
}

conv_plan& backward_plan(const conv_shape& s, bool has_bias) {
    conv_plan& p = plan(s, has_bias);
    if (!p.backward_ready) make_backward(p, s);
    return p;
}

/// The primitive of `pass` for `images` images of plan p's batch, on the batch's own layouts (so that it
/// runs on a slice of them), when oneDNN gives it the batch primitive's implementation (the same kernel:
/// the same bits for every image); made on first use.
const std::optional<chunk_primitive>& chunk_primitive_for(conv_plan& p, const conv_shape& s, chunk_pass pass,
                                                          std::size_t images) {
    const auto key = std::pair{pass, images};
    if (auto it = p.chunks.find(key); it != p.chunks.end()) return it->second;
    std::optional<chunk_primitive> made;
    const conv_descs d = descs(s, p.has_bias);
    dnnl::primitive_attr attr; // each thread hands over its own scratchpad
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
        const dnnl::convolution_forward::desc fd(
            dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, first_images(p.fx->inner, images),
            p.fw->inner, d.b, first_images(p.fy->inner, images), d.strides, d.dilates, d.pad_l, d.pad_r);
        const dnnl::convolution_forward::primitive_desc fpd(fd, attr, engine());
        if (pass == chunk_pass::forward) {
            if (std::string(fpd.impl_info_str()) == p.fwd_pd.impl_info_str())
                made.emplace(chunk_primitive{dnnl::convolution_forward(fpd), fpd.scratchpad_desc()});
        } else {
            const dnnl::convolution_backward_data::desc bd(
                dnnl::algorithm::convolution_direct, first_images(p.ddx->inner, images), p.dw_w->inner,
                first_images(p.ddy->inner, images), d.strides, d.dilates, d.pad_l, d.pad_r);
            const dnnl::convolution_backward_data::primitive_desc bpd(bd, attr, engine(), fpd);
            if (bpd.impl_info_str() == p.bwd_data_impl)
                made.emplace(chunk_primitive{dnnl::convolution_backward_data(bpd), bpd.scratchpad_desc()});
        }
    } catch (const dnnl::error&) { // no implementation for these layouts: the whole batch at once
    }
    return p.chunks.emplace(key, std::move(made)).first->second;
}

/// The most float32 results a chunk of images writes: within a core's L2 (1 MiB on Zen 4, 2 MiB on
/// Sapphire Rapids) with room for its inputs and what the caller makes of it. On Zen 4, 128 and 256 KiB
/// gave the cnn's bfloat16 step the same time, 512 KiB and the whole batch (11 MiB) a longer one.
constexpr std::size_t chunk_bytes = 256 * 1024;

/// What a chunk pass reads image by image (x, or dy) and writes (y, or dx).
const operand& chunk_input(const conv_plan& p, chunk_pass pass) { return pass == chunk_pass::forward ? *p.fx : *p.ddy; }
const operand& chunk_output(const conv_plan& p, chunk_pass pass) {
    return pass == chunk_pass::forward ? *p.fy : *p.ddx;
}

/// How many images `pass` of plan p runs at a time (whole chunks of that many, then one at a time), or 0
/// when it cannot run on part of the batch: its input and output in layouts that keep images whole, and
/// chunk_primitive_for()'s primitives for that many images and for one.
std::size_t chunk_images(conv_plan& p, const conv_shape& s, chunk_pass pass) {
    const operand &in = chunk_input(p, pass), &out = chunk_output(p, pass);
    const std::size_t out_step = image_bytes(out.inner);
    if (image_bytes(in.inner) == 0 || out_step == 0 || image_bytes(out.user) == 0) return 0;
    const std::size_t k = std::clamp<std::size_t>(chunk_bytes / out_step, 1, s.n);
    return chunk_primitive_for(p, s, pass, k) && chunk_primitive_for(p, s, pass, 1) ? k : 0;
}

/// Runs `pass` on the batch k images at a time, each thread on its own images (serially: oneDNN runs so
/// inside a parallel region), reading `in` (the pass's input in its primitive's layout) and the weights
/// `ws` (and the bias, forward), and hands each image's float32 results over while they are in the
/// thread's cache: image(n, v, block), as the primitive wrote them when that is channel-blocked and the
/// pass is the forward one, else in the plain layout.
void run_in_chunks(conv_plan& p, const conv_shape& s, chunk_pass pass, std::size_t k, const dnnl::memory& in,
                   const dnnl::memory& ws, const float* bias, const conv_image_sink& image) {
    const operand &from = chunk_input(p, pass), &to = chunk_output(p, pass);
    const bool forward = pass == chunk_pass::forward;
    const std::size_t in_step = image_bytes(from.inner), out_step = image_bytes(to.inner),
                      block = forward ? channel_block(to.inner) : 0;
    const image_reorder* plain = // to the plain layout, when the results are not handed over as written
        block || !to.to_user ? nullptr : &cached(forward ? p.y_image : p.dx_image, to.inner, to.user);
    split(s.n, 1, [&](std::size_t first, std::size_t end) {
        for (std::size_t n = first, m; n < end; n += m) {
            m = end - n >= k ? k : 1;
            float* v = scratch(0, m * out_step);
            std::unordered_map<int, dnnl::memory> args{
                {forward ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST,
                 dnnl::memory(first_images(from.inner, m), engine(), image_at(in.get_data_handle(), n, in_step))},
                {DNNL_ARG_WEIGHTS, ws},
                {forward ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC, dnnl::memory(first_images(to.inner, m), engine(), v)}};
            if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias_md, engine(), const_cast<float*>(bias)));
            const chunk_primitive& chunk = *p.chunks.at({pass, m});
            args.emplace(DNNL_ARG_SCRATCHPAD,
                         dnnl::memory(chunk.scratchpad, engine(), scratch(2, chunk.scratchpad.get_size())));
            chunk.run.execute(stream(), args);
            for (std::size_t i = 0; i < m; ++i) {
                float* results = reinterpret_cast<float*>(image_at(v, i, out_step));
                if (!plain) {
                    image(n + i, results, block);
                    continue;
                }
                float* u = scratch(1, image_bytes(to.user));
                (*plain)(results, u);
                image(n + i, u, 0);
            }
        }
    });
}

/// dx from dy (in the data pass's layout, in memory dy), handed over image by image in the plain layout:
/// in chunks where oneDNN can, else from one run on the whole batch.
void input_gradient(conv_plan& p, const conv_shape& s, const void* w, const dnnl::memory& dy,
                    const conv_image_sink& dx_image) {
    const dnnl::memory ws = p.dw_w->in(w);
    if (const std::size_t k = chunk_images(p, s, chunk_pass::backward_data)) {
        stream().wait();
        return run_in_chunks(p, s, chunk_pass::backward_data, k, dy, ws, nullptr, dx_image);
    }
    const std::size_t per_image = s.c * s.h * s.w;
    thread_local std::vector<float> whole;
    whole.resize(s.n * per_image);
    data_pass(p, dy, ws, whole.data());
    stream().wait();
    each_image(s.n, per_image, [&](std::size_t n) { dx_image(n, whole.data() + n * per_image, 0); });
}

} // namespace

std::uint64_t onednn_conv_forward(const conv_shape& s, const void* x, const void* w, const float* bias, float* y) {
    conv_plan& p = plan(s, bias != nullptr);
    const std::uint64_t run = run_forward(p, x, w, bias, y);
    p.fy->flush(y);
    stream().wait();
    return run;
}

std::uint64_t onednn_conv_forward_images(const conv_shape& s, const void* x, const void* w, const float* bias,
                                         const conv_image_sink& image) {
    conv_plan& p = plan(s, bias != nullptr);
    if (const std::size_t k = chunk_images(p, s, chunk_pass::forward)) {
        const dnnl::memory xs = p.fx->in(x), ws = p.fw->in(w);
        stream().wait();
        const std::uint64_t run = note_forward_run(p);
        run_in_chunks(p, s, chunk_pass::forward, k, xs, ws, bias, image);
        return run;
    }
    const std::size_t per_image = s.o * s.ho * s.wo, bytes = per_image * sizeof(float);
    if (p.fy->to_user && by_image(p.fy->inner, p.fy->user)) {
        const std::uint64_t run = run_forward(p, x, w, bias, nullptr);
        stream().wait();
        void* results = p.fy->buffer.get_data_handle();
        if (const std::size_t block = channel_block(p.fy->inner)) { // handed over as written
            const std::size_t step = image_bytes(p.fy->inner);
            each_image(s.n, per_image,
                       [&](std::size_t n) { image(n, reinterpret_cast<float*>(image_at(results, n, step)), block); });
            return run;
        }
        const image_reorder& r = cached(p.y_image, p.fy->inner, p.fy->user); // by the thread that takes it
        each_image(s.n, per_image, [&](std::size_t n) {
            float* v = scratch(0, bytes);
            r(image_at(results, n, r.from_step), v);
            image(n, v, 0);
        });
        return run;
    }
    thread_local std::vector<float> whole; // the images as oneDNN wrote them, handed over in place
    whole.resize(s.n * per_image);
    const std::uint64_t run = onednn_conv_forward(s, x, w, bias, whole.data());
    each_image(s.n, per_image, [&](std::size_t n) { image(n, whole.data() + n * per_image, 0); });
    return run;
}

void onednn_conv_backward(const conv_shape& s, const void* x, std::uint64_t forward_run, const void* w, const void* dy,
                          float* dx, float* dw, float* db) {
    conv_plan& p = backward_plan(s, db != nullptr);
    const dnnl::memory for_data = dx ? p.ddy->in(dy) : dnnl::memory();
    run_backward(p, x, forward_run, w, for_data, p.wdy->in(dy), dx, dw, db);
}

void onednn_conv_backward_images(const conv_shape& s, const void* x, std::uint64_t forward_run, const void* w,
                                 const conv_image_source& dy_image, const conv_image_sink* dx_image, float* dw,
                                 float* db) {
    conv_plan& p = backward_plan(s, db != nullptr);
    const std::size_t per_image = s.o * s.ho * s.wo,
                      bytes = per_image * dnnl::memory::data_type_size(p.wdy->user.data_type());
    // dy made in the weights pass's layout, when the data pass wants the same one (or is not run)
    operand& target = *p.wdy;
    if (target.to_inner && (!dx_image || p.ddy->inner == target.inner) && by_image(target.user, target.inner)) {
        void* to = target.buffer.get_data_handle();
        if (const std::size_t block = channel_block(target.inner)) { // made in place
            const std::size_t step = image_bytes(target.inner);
            each_image(s.n, per_image, [&](std::size_t n) { dy_image(n, image_at(to, n, step), block); });
        } else {
            const image_reorder& r = cached(p.dy_image, target.user, target.inner);
            each_image(s.n, per_image, [&](std::size_t n) {
                float* v = scratch(1, bytes);
                dy_image(n, v, 0);
                r(v, image_at(to, n, r.to_step));
            });
        }
        if (dx_image) input_gradient(p, s, w, target.buffer, *dx_image);
        run_backward(p, x, forward_run, w, dnnl::memory(), target.buffer, nullptr, dw, db);
        return;
    }
    thread_local std::vector<std::byte> whole;
    whole.resize(s.n * bytes);
    each_image(s.n, per_image, [&](std::size_t n) { dy_image(n, whole.data() + n * bytes, 0); });
    if (dx_image) input_gradient(p, s, w, p.ddy->in(whole.data()), *dx_image);
    run_backward(p, x, forward_run, w, dnnl::memory(), p.wdy->in(whole.data()), nullptr, dw, db);
}

} // namespace mixprec::autodiff::detail
