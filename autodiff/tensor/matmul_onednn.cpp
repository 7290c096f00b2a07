#include <mixprec/autodiff/tensor/detail/isa_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/onednn_kernels.hpp>

#include <omp.h>

#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

namespace mixprec::autodiff::detail {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

dnnl::engine& engine() { return onednn_engine(); }

struct matmul_plan {
    dnnl::memory::desc a, b, c, bias;
    dnnl::matmul primitive;
};

/// A matrix product's primitive for operands of type `in` (bfloat16 or float32) and a result of type `out`,
/// with a bias of type `in` or none.
matmul_plan make_plan(const gemm_shape& s, dt in, dt out, bool with_bias) {
    const auto B = static_cast<dnnl::memory::dim>(s.batch), M = static_cast<dnnl::memory::dim>(s.m),
               N = static_cast<dnnl::memory::dim>(s.n), K = static_cast<dnnl::memory::dim>(s.k);
    // Logical shapes are (batch, m, k) @ (batch, k, n); strides describe how the operands are stored.
    const dnnl::memory::desc a({B, M, K}, in, s.transpose_a ? dims{M * K, 1, M} : dims{M * K, K, 1});
    const dnnl::memory::desc b({s.batched_b ? B : 1, K, N}, in, s.transpose_b ? dims{K * N, 1, K} : dims{K * N, N, 1});
    const dnnl::memory::desc c({B, M, N}, out, dims{M * N, N, 1});
    const dnnl::memory::desc bias = with_bias ? dnnl::memory::desc({1, 1, N}, in, dims{N, N, 1}) : dnnl::memory::desc();
    const dnnl::matmul::primitive_desc pd(with_bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c),
                                          engine());
    return {a, b, c, bias, dnnl::matmul(pd)};
}

} // namespace

/// oneDNN's own cap for a level MIXPREC_ISA named (oneDNN has no level below sse41).
dnnl::cpu_isa onednn_isa(Isa level) {
    switch (level) {
    case Isa::portable:
        return dnnl::cpu_isa::sse41;
    case Isa::avx2:
        return dnnl::cpu_isa::avx2;
    case Isa::avx512:
        return dnnl::cpu_isa::avx512_core;
    case Isa::avx512_bf16:
        return dnnl::cpu_isa::avx512_core_bf16;
    }
    return dnnl::cpu_isa::all;
}

dnnl::engine& onednn_engine() {
    static dnnl::engine e = [] {
        // Before oneDNN's first primitive: it can be capped only once, before it dispatches anything.
        if (const auto level = requested_isa()) {
            try {
                dnnl::set_max_cpu_isa(onednn_isa(*level));
            } catch (const dnnl::error& error) {
                throw isa_error("MIXPREC_ISA=" + std::string(name_of(*level)) +
                                ": oneDNN was in use already and could not be capped (" + error.what() + ")");
            }
        }
        return dnnl::engine(dnnl::engine::kind::cpu, 0);
    }();
    return e;
}

dnnl::stream& onednn_stream() {
    thread_local dnnl::stream s(onednn_engine());
    return s;
}

bool onednn_bf16_available() { return isa() >= Isa::avx512_bf16; }

namespace {

/// c = op(a) op(b) by this thread's primitive for the shape, the types and the thread count (made on first
/// use: creation costs far more than a small product). oneDNN fixes a primitive's thread count when it
/// makes it: one made on one thread would stay on one after the pool grows again (CoreShare).
void run_matmul(const gemm_shape& s, dt in, dt out, const void* a, const void* b, void* c, const void* bias) {
    using key_t = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, bool, bool, bool, dt, dt, bool, int>;
    thread_local std::map<key_t, matmul_plan> plans;
    const bool with_bias = bias != nullptr;
    const key_t key{s.batch,     s.m, s.n, s.k,       s.transpose_a,        s.transpose_b,
                    s.batched_b, in,  out, with_bias, omp_get_max_threads()};
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, make_plan(s, in, out, with_bias)).first;
    const matmul_plan& p = it->second;

    dnnl::stream& stream = onednn_stream();
    dnnl::memory ma(p.a, engine(), const_cast<void*>(a)), mb(p.b, engine(), const_cast<void*>(b)), mc(p.c, engine(), c);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    if (with_bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias, engine(), const_cast<void*>(bias)));
    p.primitive.execute(stream, args);
    stream.wait();
}

} // namespace

void onednn_matmul_bf16(const gemm_shape& s, const void* a, const void* b, void* c, bool bf16_out, const void* bias) {
    run_matmul(s, dt::bf16, bf16_out ? dt::bf16 : dt::f32, a, b, c, bias);
}

void onednn_matmul_f32(const gemm_shape& s, const float* a, const float* b, float* c) {
    run_matmul(s, dt::f32, dt::f32, a, b, c, nullptr);
}

void onednn_sgemm(const gemm_shape& s, const float* a, const float* b, float* c) {
    onednn_engine(); // caps oneDNN if MIXPREC_ISA named a level, before its first kernel
    const auto m = static_cast<dnnl_dim_t>(s.m), n = static_cast<dnnl_dim_t>(s.n), k = static_cast<dnnl_dim_t>(s.k);
    for (std::size_t i = 0; i < s.batch; ++i) {
        const dnnl_status_t status =
            dnnl_sgemm(s.transpose_a ? 'T' : 'N', s.transpose_b ? 'T' : 'N', m, n, k, 1.0f, a + i * s.m * s.k,
                       s.transpose_a ? m : k, b + (s.batched_b ? i * s.k * s.n : 0), s.transpose_b ? k : n, 0.0f,
                       c + i * s.m * s.n, n);
        if (status != dnnl_success)
            throw std::runtime_error("oneDNN's sgemm failed for a (" + std::to_string(s.m) + ", " +
                                     std::to_string(s.k) + ") by (" + std::to_string(s.k) + ", " + std::to_string(s.n) +
                                     ") product (status " + std::to_string(status) + ")");
    }
}

void onednn_set_threads(int threads) { omp_set_num_threads(threads); }

unsigned onednn_effective_isa() {
    onednn_engine(); // caps oneDNN if MIXPREC_ISA named a level
    return static_cast<unsigned>(dnnl::get_effective_cpu_isa());
}

bool onednn_amx() {
    static const bool amx = onednn_effective_isa() >= static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    return amx;
}

} // namespace mixprec::autodiff::detail
