// The oneDNN convolution's forward and data passes a few images at a time, on each thread's own images
// (conv_onednn_plan.hpp).
#include <mixprec/autodiff/tensor/detail/conv_onednn_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace mixprec::autodiff::detail::onednn_conv {

namespace {

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

} // namespace

std::size_t chunk_images(conv_plan& p, const conv_shape& s, chunk_pass pass) {
    const operand &in = chunk_input(p, pass), &out = chunk_output(p, pass);
    const std::size_t out_step = image_bytes(out.inner);
    if (image_bytes(in.inner) == 0 || out_step == 0 || image_bytes(out.user) == 0) return 0;
    const std::size_t k = std::clamp<std::size_t>(chunk_bytes / out_step, 1, s.n);
    return chunk_primitive_for(p, s, pass, k) && chunk_primitive_for(p, s, pass, 1) ? k : 0;
}

void run_in_chunks(conv_plan& p, const conv_shape& s, chunk_pass pass, std::size_t k, const dnnl::memory& in,
                   const dnnl::memory& ws, const float* bias, const conv_image_sink& image) {
    const operand &from = chunk_input(p, pass), &to = chunk_output(p, pass);
    const bool forward = pass == chunk_pass::forward;
    // handed over as written: the forward's results in any block, dx in blocks of 16 or channels last
    // (conv_kernels.hpp)
    const std::size_t in_step = image_bytes(from.inner), out_step = image_bytes(to.inner),
                      written = channel_block(to.inner), block = forward || written % 16 == 0 ? written : 0;
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

} // namespace mixprec::autodiff::detail::onednn_conv
