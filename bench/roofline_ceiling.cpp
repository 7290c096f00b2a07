// The libraries' ceiling of a training step: see roofline_ceiling.hpp.

#include "roofline_ceiling.hpp"

#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace mixprec::bench {
namespace {

using tag = dnnl::memory::format_tag;
using Clock = std::chrono::steady_clock;

/// The best of a few timed runs of `run` (ms), after two untimed ones (JIT code, first touch of the buffers).
double best_ms(const std::function<void()>& run) {
    run();
    run();
    double best = 1e300;
    for (int i = 0; i < 10; ++i) {
        const auto start = Clock::now();
        run();
        best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    return best;
}

const dnnl::engine& engine() {
    static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

/// Small values that stay normal through any sum of the passes (the time must not see subnormals).
void fill(float* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) p[i] = 0.01f * float(i % 7 + 1);
}

/// A oneDNN primitive with buffers for every argument it takes, filled.
struct Bound {
    dnnl::primitive primitive;
    std::unordered_map<int, dnnl::memory> args;

    template <class Pd>
    Bound(const Pd& pd, std::initializer_list<int> kinds) : primitive(pd) {
        for (int kind : kinds) {
            const dnnl::memory::desc md = pd.query_md(dnnl::query::exec_arg_md, kind);
            dnnl::memory m(md, engine());
            fill(static_cast<float*>(m.get_data_handle()), md.get_size() / sizeof(float));
            args.emplace(kind, m);
        }
        args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(pd.scratchpad_desc(), engine()));
    }
    void operator()() const {
        dnnl::stream stream(engine());
        primitive.execute(stream, args);
        stream.wait();
    }
};

/// The fastest of `pd`'s implementations (from the one it holds on), reference ones excluded, as a pass.
template <class Pd>
std::optional<std::pair<std::string, std::shared_ptr<Bound>>> fastest(Pd pd, std::initializer_list<int> kinds,
                                                                      double& best) {
    std::optional<std::pair<std::string, std::shared_ptr<Bound>>> chosen;
    do {
        const std::string impl = pd.impl_info_str();
        if (impl.starts_with("ref")) continue;
        auto bound = std::make_shared<Bound>(pd, kinds);
        const double ms = best_ms([&] { (*bound)(); });
        if (ms < best) {
            best = ms;
            chosen.emplace(impl, std::move(bound));
        }
    } while (pd.next_impl());
    return chosen;
}

/// A convolution of the model, as oneDNN describes it.
struct ConvShape {
    dnnl::memory::dims x, w, b, y, strides, pad_l, pad_r;
};

ConvShape conv_shape(const models::Conv2D& layer, std::size_t batch) {
    const autodiff::Shape &in = layer.input_shape(), &out = layer.output_shape(); // (C, H, W), (O, Ho, Wo)
    const auto [kh, kw] = layer.kernel_size();
    const auto [sh, sw] = layer.stride();
    const auto d = [](std::size_t v) { return static_cast<dnnl::memory::dim>(v); };
    // "same": the padding TensorFlow places, the odd one after
    const auto total = [](std::size_t size, std::size_t k, std::size_t s, std::size_t o) {
        return std::max<std::ptrdiff_t>(0, std::ptrdiff_t((o - 1) * s + k) - std::ptrdiff_t(size));
    };
    const std::ptrdiff_t ph = total(in[1], kh, sh, out[1]), pw = total(in[2], kw, sw, out[2]);
    return {{d(batch), d(in[0]), d(in[1]), d(in[2])},
            {d(out[0]), d(in[0]), d(kh), d(kw)},
            {d(out[0])},
            {d(batch), d(out[0]), d(out[1]), d(out[2])},
            {d(sh), d(sw)},
            {ph / 2, pw / 2},
            {ph - ph / 2, pw - pw / 2}};
}

std::string conv_name(const models::Conv2D& layer) {
    const autodiff::Shape &in = layer.input_shape(), &out = layer.output_shape();
    return "conv2d " + std::to_string(in[0]) + "→" + std::to_string(out[0]) + " at " + std::to_string(in[1]) + "×" +
           std::to_string(in[2]);
}

/// A matrix product c (m, n) = op(a) op(b), row-major, on ready buffers, run by mixprec's own calls into
/// OpenBLAS's or oneDNN's sgemm (detail::sgemm).
struct Gemm {
    autodiff::detail::gemm_shape shape;
    std::shared_ptr<std::vector<float>> a, b, c;

    Gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k)
        : shape{1, m, n, k, ta, tb, false},
          a(std::make_shared<std::vector<float>>(m * k)),
          b(std::make_shared<std::vector<float>>(k * n)),
          c(std::make_shared<std::vector<float>>(m * n)) {
        fill(a->data(), a->size());
        fill(b->data(), b->size());
    }
    /// The product by one of the libraries' kernels.
    enum class kernel { openblas_sgemm, onednn_sgemm, onednn_matmul };
    static constexpr const char* names[] = {"openblas sgemm", "onednn sgemm", "onednn matmul"};
    void operator()(kernel k) const {
        if (k == kernel::openblas_sgemm) autodiff::detail::openblas_sgemm(shape, a->data(), b->data(), c->data());
        if (k == kernel::onednn_sgemm) autodiff::detail::onednn_sgemm(shape, a->data(), b->data(), c->data());
        if (k == kernel::onednn_matmul) autodiff::detail::onednn_matmul_f32(shape, a->data(), b->data(), c->data());
    }
};

} // namespace

void LibraryCeiling::add(Pass pass) {
    char ms[32];
    std::snprintf(ms, sizeof ms, " %.3f ms", pass.ms);
    choices_ += (choices_.empty() ? "" : "; ") + pass.what + ": " + pass.kernel + ms;
    passes_.push_back(std::move(pass));
}

void LibraryCeiling::run() const {
    for (const Pass& p : passes_) p.run();
}

std::optional<LibraryCeiling> LibraryCeiling::of(const models::Sequential& model, std::size_t batch) {
    // oneDNN capped as mixprec caps it (MIXPREC_ISA) before this dispatches anything, so that the ceiling runs
    // at the steps' level and the steps can still cap it after
    autodiff::detail::onednn_effective_isa();
    LibraryCeiling ceiling;
    bool input_needs_grad = false; // as flops(): true once a layer with variables lies upstream
    for (const auto& layer : model.layers()) {
        const bool has_variables = !layer->variables().empty();
        if (const auto* dense = dynamic_cast<const models::Dense*>(layer.get())) {
            const autodiff::Shape& in = layer->input_shape();
            const std::size_t k = in[in.rank() - 1], rows = batch * in.elements() / k, units = dense->units();
            const std::string name = "dense " + std::to_string(k) + "→" + std::to_string(units);
            std::vector<std::pair<std::string, Gemm>> gemms;
            gemms.reserve(3);
            gemms.emplace_back(name + " forward", Gemm(false, false, rows, units, k));
            gemms.emplace_back(name + " weights", Gemm(true, false, k, units, rows));
            if (input_needs_grad) gemms.emplace_back(name + " input", Gemm(false, true, rows, k, units));
            for (const auto& [what, g] : gemms) {
                Gemm::kernel fastest = Gemm::kernel::openblas_sgemm;
                double fastest_ms = 1e300;
                for (Gemm::kernel k :
                     {Gemm::kernel::openblas_sgemm, Gemm::kernel::onednn_sgemm, Gemm::kernel::onednn_matmul})
                    if (const double ms = best_ms([&g = g, k] { g(k); }); ms < fastest_ms) {
                        fastest = k;
                        fastest_ms = ms;
                    }
                ceiling.add(
                    {what, Gemm::names[static_cast<int>(fastest)], fastest_ms, [g = g, fastest] { g(fastest); }});
            }
        } else if (const auto* conv = dynamic_cast<const models::Conv2D*>(layer.get())) {
            const ConvShape s = conv_shape(*conv, batch);
            const bool bias = layer->variables().size() > 1; // {kernel, bias}
            const std::string name = conv_name(*conv);
            using dt = dnnl::memory::data_type;
            double best[3] = {1e300, 1e300, 1e300}; // forward, weights, input
            std::optional<std::pair<std::string, std::shared_ptr<Bound>>> chosen[3];
            for (tag layout : {tag::any, tag::nhwc}) {
                const dnnl::memory::desc x(s.x, dt::f32, layout), w(s.w, dt::f32, tag::any), y(s.y, dt::f32, layout),
                    b = bias ? dnnl::memory::desc(s.b, dt::f32, tag::x) : dnnl::memory::desc();
                const dnnl::convolution_forward::primitive_desc fpd({dnnl::prop_kind::forward_training,
                                                                     dnnl::algorithm::convolution_direct, x, w, b, y,
                                                                     s.strides, s.pad_l, s.pad_r},
                                                                    engine());
                const auto keep = [&](int i, auto found) {
                    if (found) chosen[i] = std::move(found);
                };
                keep(0, fastest(fpd, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST}, best[0]));
                keep(1, fastest(dnnl::convolution_backward_weights::primitive_desc(
                                    {dnnl::algorithm::convolution_direct, x, w, b, y, s.strides, s.pad_l, s.pad_r},
                                    engine(), fpd),
                                {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS}, best[1]));
                if (input_needs_grad)
                    keep(2, fastest(dnnl::convolution_backward_data::primitive_desc(
                                        {dnnl::algorithm::convolution_direct, x, w, y, s.strides, s.pad_l, s.pad_r},
                                        engine(), fpd),
                                    {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC}, best[2]));
            }
            const char* passes[3] = {" forward", " weights", " input"};
            for (int i = 0; i < 3; ++i) {
                if (i == 2 && !input_needs_grad) continue;
                if (!chosen[i])
                    throw std::runtime_error(name + passes[i] + ": oneDNN has only its reference implementation");
                ceiling.add({name + passes[i], "onednn " + chosen[i]->first, best[i],
                             [bound = chosen[i]->second] { (*bound)(); }});
            }
        } else {
            const std::string kind = layer->kind();
            if (kind == "MultiHeadSelfAttention" || kind == "TransformerBlock") return std::nullopt;
        }
        if (has_variables) input_needs_grad = true;
    }
    return ceiling;
}

} // namespace mixprec::bench
