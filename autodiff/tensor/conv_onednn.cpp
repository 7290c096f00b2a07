// conv2d through oneDNN's convolution primitives, on float32 or bfloat16 operands. oneDNN always writes
// float32 here; the caller rounds each result once with narrow(), so oneDNN never rounds itself.
//
// The interface is in conv_kernels.hpp; the plans and the passes in chunks of images behind it in
// conv_onednn_plan.hpp.
//
// x, w and dy hold the operand type (NCHW / OIHW); bias, y, dx, dw (OIHW) and db (O, may be null) are
// float32.
#include <mixprec/autodiff/tensor/detail/conv_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/conv_onednn_plan.hpp>
#include <mixprec/autodiff/tensor/detail/grown.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mixprec::autodiff::detail {

using namespace onednn_conv;

namespace {

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
    float* dx = grown(whole, s.n * per_image);
    data_pass(p, dy, ws, dx);
    stream().wait();
    each_image(s.n, per_image, [&](std::size_t n) { dx_image(n, dx + n * per_image, 0); });
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
    float* y = grown(whole, s.n * per_image);
    const std::uint64_t run = onednn_conv_forward(s, x, w, bias, y);
    each_image(s.n, per_image, [&](std::size_t n) { image(n, y + n * per_image, 0); });
    return run;
}

void onednn_conv_backward(const conv_shape& s, const conv_input& x, std::uint64_t forward_run, const void* w,
                          const void* dy, float* dx, float* dw, float* db) {
    conv_plan& p = backward_plan(s, db != nullptr);
    const dnnl::memory for_data = dx ? p.ddy->in(dy) : dnnl::memory();
    run_backward(p, s, x, forward_run, w, for_data, p.wdy->in(dy), dx, dw, db);
}

void onednn_conv_backward_images(const conv_shape& s, const conv_input& x, std::uint64_t forward_run, const void* w,
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
        run_backward(p, s, x, forward_run, w, dnnl::memory(), target.buffer, nullptr, dw, db);
        return;
    }
    thread_local std::vector<std::byte> whole;
    std::byte* dy = grown(whole, s.n * bytes);
    each_image(s.n, per_image, [&](std::size_t n) { dy_image(n, dy + n * bytes, 0); });
    if (dx_image) input_gradient(p, s, w, p.ddy->in(dy), *dx_image);
    run_backward(p, s, x, forward_run, w, dnnl::memory(), p.wdy->in(dy), nullptr, dw, db);
}

} // namespace mixprec::autodiff::detail
