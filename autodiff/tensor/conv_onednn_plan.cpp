// The oneDNN convolution's plans (conv_onednn_plan.hpp): per shape and thread, the primitives of the three
// passes and each operand's layouts, and the passes run on the whole batch.
#include <mixprec/autodiff/tensor/detail/conv_onednn_plan.hpp>
#include <mixprec/autodiff/tensor/detail/conv_weights_bf16.hpp>
#include <mixprec/autodiff/tensor/detail/grown.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mixprec::autodiff::detail::onednn_conv {

namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dim = dnnl::memory::dim;

/// Let oneDNN choose blocked layouts (with reorders to and from the plain ones) instead of running on
/// nchw / oihw directly.
constexpr bool blocked_layouts = true;

/// One image of `batch`, as a memory of its own.
dnnl::memory::desc one_image(const dnnl::memory::desc& batch) { return first_images(batch, 1); }

/// A number for each forward run in the process, from 1.
std::uint64_t next_run() {
    static std::atomic<std::uint64_t> runs{0};
    return ++runs;
}

dt operand_type(conv_operands t) { return t == conv_operands::bf16 ? dt::bf16 : dt::f32; }

/// The plain layout `t` of `f32_plain`'s dimensions, holding `type`.
dnnl::memory::desc plain(conv_operands type, const dnnl::memory::desc& f32_plain, tag t) {
    return dnnl::memory::desc(f32_plain.dims(), operand_type(type), t);
}

conv_plan make_plan(const conv_shape& s, bool has_bias) {
    const conv_descs d = descs(s, has_bias);
    const dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                             d.xo, d.wo, d.b, d.y_any, d.strides, d.dilates, d.pad_l, d.pad_r);
    dnnl::convolution_forward::primitive_desc pd(fd, engine());
    conv_plan p{pd, dnnl::convolution_forward(pd), {}, {}, {}, has_bias, d.b, false, {}, {}, {}, {}, {}, {}, {}, {}, {},
                {}};
    p.fx.emplace(plain(s.x_holds, d.x, tag::nchw), pd.src_desc(), true);
    p.fw.emplace(plain(s.operands, d.w, tag::oihw), pd.weights_desc(), true);
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
    p.ddy.emplace(plain(s.operands, d.y, tag::nchw), bdpd.diff_dst_desc(), true);
    p.dw_w.emplace(plain(s.operands, d.w, tag::oihw), bdpd.weights_desc(), true);
    p.ddx.emplace(d.x, bdpd.diff_src_desc(), false);
    p.wx.emplace(plain(s.x_holds, d.x, tag::nchw), bwpd.src_desc(), true);
    p.wdy.emplace(plain(s.operands, d.y, tag::nchw), bwpd.diff_dst_desc(), true);
    p.wdw.emplace(d.w, bwpd.diff_weights_desc(), false);
    p.bwd_data_impl = bdpd.impl_info_str();
    p.backward_ready = true;
}

using key_t = std::array<std::size_t, 19>;

struct key_hash {
    std::size_t operator()(const key_t& k) const noexcept {
        std::size_t h = 0;
        for (std::size_t v : k) h = h * 1000003u ^ v;
        return h;
    }
};

#if defined(MIXPREC_X86_KERNELS)
/// Whether the weights pass is bf16_weights_pass (conv_weights_bf16.hpp) rather than oneDNN's: where it
/// applies and dy, in the weights pass's layout, is in blocks of 16 channels.
bool own_weights_pass(const conv_plan& p, const conv_shape& s) {
    return bf16_weights_pass_applies(s) && p.wdy->inner.data_type() == dt::bf16 && channel_block(p.wdy->inner) == 16;
}
#endif

/// x in the weights pass's layout: the forward's reordered x when that run (forward_run) reordered it
/// into the same layout and no run has overwritten it since (x() not called), else x() reordered again.
dnnl::memory weights_pass_x(conv_plan& p, const conv_input& x, std::uint64_t forward_run) {
    if (forward_run != 0 && forward_run == p.x_run && p.wx->inner == p.fx->inner) return p.fx->buffer;
    return p.wx->in(x());
}

} // namespace

operand::operand(const dnnl::memory::desc& u, const dnnl::memory::desc& i, bool input) : user(u), inner(i) {
    if (user != inner) {
        buffer = dnnl::memory(inner, engine());
        if (input)
            to_inner.emplace(dnnl::reorder::primitive_desc(engine(), user, engine(), inner));
        else
            to_user.emplace(dnnl::reorder::primitive_desc(engine(), inner, engine(), user));
    }
}

dnnl::memory operand::in(const void* data) {
    dnnl::memory u(user, engine(), const_cast<void*>(data));
    if (!to_inner) return u;
    to_inner->execute(stream(), u, buffer);
    return buffer;
}

dnnl::memory operand::out(void* data) { return to_user ? buffer : dnnl::memory(user, engine(), data); }

void operand::flush(void* data) {
    if (!to_user) return;
    dnnl::memory u(user, engine(), data);
    to_user->execute(stream(), buffer, u);
}

std::size_t image_bytes(const dnnl::memory::desc& batch) {
    const dnnl_memory_desc_t& d = batch.data;
    if (d.format_kind != dnnl_blocked || d.ndims < 1 || d.dims[0] < 1) return 0;
    const auto step =
        static_cast<std::size_t>(d.format_desc.blocking.strides[0]) * dnnl::memory::data_type_size(batch.data_type());
    return step * static_cast<std::size_t>(d.dims[0]) == batch.get_size() ? step : 0;
}

dnnl::memory::desc first_images(const dnnl::memory::desc& batch, std::size_t images) {
    dims d = batch.dims();
    d[0] = static_cast<dim>(images);
    return batch.submemory_desc(d, dims(d.size(), 0));
}

std::size_t channel_block(const dnnl::memory::desc& batch) {
    if (batch.dims().size() != 4) return 0;
    for (const auto& [block, layout] : {std::pair{16, tag::aBcd16b}, std::pair{8, tag::aBcd8b}})
        if (batch == dnnl::memory::desc(batch.dims(), batch.data_type(), layout)) return block;
    const auto channels = static_cast<std::size_t>(batch.dims()[1]);
    if (channels % 16 == 0 && batch == dnnl::memory::desc(batch.dims(), batch.data_type(), tag::acdb)) return channels;
    return 0;
}

bool by_image(const dnnl::memory::desc& a, const dnnl::memory::desc& b) {
    return image_bytes(a) != 0 && image_bytes(b) != 0;
}

image_reorder::image_reorder(const dnnl::memory::desc& from_batch, const dnnl::memory::desc& to_batch)
    : from(one_image(from_batch)),
      to(one_image(to_batch)),
      from_step(image_bytes(from_batch)),
      to_step(image_bytes(to_batch)),
      run(dnnl::reorder::primitive_desc(engine(), from, engine(), to)) {}

void image_reorder::operator()(const void* image, void* into) const {
    dnnl::memory a(from, engine(), const_cast<void*>(image)), b(to, engine(), into);
    run.execute(stream(), a, b);
}

const image_reorder& cached(std::optional<image_reorder>& r, const dnnl::memory::desc& from,
                            const dnnl::memory::desc& to) {
    if (!r) r.emplace(from, to);
    return *r;
}

float* scratch(std::size_t slot, std::size_t bytes) {
    constexpr std::size_t align = 64 / sizeof(float);
    thread_local std::array<std::vector<float>, 3> pool;
    const std::size_t n = (bytes + sizeof(float) - 1) / sizeof(float) + align;
    float* data = grown(pool[slot], n);
    const auto at = reinterpret_cast<std::uintptr_t>(data);
    return data + (align - at / sizeof(float) % align) % align;
}

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

conv_plan& plan(const conv_shape& s, bool has_bias) {
    thread_local std::unordered_map<key_t, conv_plan, key_hash> plans;
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
                    static_cast<std::size_t>(s.operands),
                    static_cast<std::size_t>(s.x_holds),
                    static_cast<std::size_t>(omp_get_max_threads())}; // oneDNN fixes it in each primitive
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, make_plan(s, has_bias)).first;
    return it->second;
}

conv_plan& backward_plan(const conv_shape& s, bool has_bias) {
    conv_plan& p = plan(s, has_bias);
    if (!p.backward_ready) make_backward(p, s);
    return p;
}

std::uint64_t note_forward_run(conv_plan& p) {
    p.x_run = p.fx->to_inner ? next_run() : 0;
    return p.x_run;
}

std::uint64_t run_forward(conv_plan& p, const void* x, const void* w, const float* bias, float* y) {
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, p.fx->in(x)}, {DNNL_ARG_WEIGHTS, p.fw->in(w)}, {DNNL_ARG_DST, p.fy->out(y)}};
    if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias_md, engine(), const_cast<float*>(bias)));
    p.fwd.execute(stream(), args);
    return note_forward_run(p);
}

void data_pass(conv_plan& p, const dnnl::memory& dy, const dnnl::memory& ws, float* dx) {
    p.bwd_data.execute(stream(),
                       {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, ws}, {DNNL_ARG_DIFF_SRC, p.ddx->out(dx)}});
    p.ddx->flush(dx);
}

void run_backward(conv_plan& p, [[maybe_unused]] const conv_shape& s, const conv_input& x, std::uint64_t forward_run,
                  const void* w, const dnnl::memory& dy_data, const dnnl::memory& dy_weights, float* dx, float* dw,
                  float* db) {
    if (dx) data_pass(p, dy_data, p.dw_w->in(w), dx);
#if defined(MIXPREC_X86_KERNELS)
    if (own_weights_pass(p, s)) {
        stream().wait();
        return bf16_weights_pass(s, x(), dy_weights.get_data_handle(), dw, db);
    }
#endif
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, weights_pass_x(p, x, forward_run)},
                                               {DNNL_ARG_DIFF_DST, dy_weights},
                                               {DNNL_ARG_DIFF_WEIGHTS, p.wdw->out(dw)}};
    if (db) args.emplace(DNNL_ARG_DIFF_BIAS, dnnl::memory(p.bias_md, engine(), db));
    p.bwd_weights.execute(stream(), args);
    p.wdw->flush(dw);
    stream().wait();
}

} // namespace mixprec::autodiff::detail::onednn_conv
