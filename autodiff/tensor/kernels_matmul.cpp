#include <mixprec/autodiff/tensor/kernels_matmul.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/fastest.hpp>
#include <mixprec/autodiff/tensor/detail/grown.hpp>
#include <mixprec/autodiff/tensor/detail/kernels_map.hpp>
#include <mixprec/autodiff/tensor/detail/matmul_kernels.hpp>
#include <mixprec/autodiff/tensor/detail/named_choice.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/isa.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::autodiff {
namespace detail {

/// Batched products of fewer multiply-adds than this each are spread over the threads, a product per
/// thread at a time; larger ones run one after the other on OpenBLAS's own threads.
constexpr std::size_t batch_split_below = std::size_t{1} << 18;

void sgemm(const gemm_shape& s, const float* a, const float* b, float* c, bool onednn) {
    if (onednn) {
        onednn_matmul_f32(s, a, b, c);
    } else {
        openblas_sgemm(s, a, b, c);
    }
}

void openblas_sgemm(const gemm_shape& s, const float* a, const float* b, float* c) {
    const auto ta = s.transpose_a ? CblasTrans : CblasNoTrans;
    const auto tb = s.transpose_b ? CblasTrans : CblasNoTrans;
    const auto lda = static_cast<blasint>(s.transpose_a ? s.m : s.k);
    const auto ldb = static_cast<blasint>(s.transpose_b ? s.k : s.n);
    if (!s.batched_b && !s.transpose_a) { // the batches stack into one taller matrix
        cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(s.batch * s.m), static_cast<blasint>(s.n),
                    static_cast<blasint>(s.k), 1.0f, a, lda, b, ldb, 0.0f, c, static_cast<blasint>(s.n));
        return;
    }
    // Small products of a batch (attention's per head) run whole on each thread, as OpenBLAS runs one
    // product on one thread inside a parallel region: the same bits as one after the other.
    const std::size_t per_product = s.m * s.n * s.k;
    split(s.batch, per_product >= batch_split_below ? s.batch : 1, [&](std::size_t i0, std::size_t i1) {
        for (std::size_t i = i0; i < i1; ++i)
            cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(s.m), static_cast<blasint>(s.n),
                        static_cast<blasint>(s.k), 1.0f, a + i * s.m * s.k, lda, b + (s.batched_b ? i * s.k * s.n : 0),
                        ldb, 0.0f, c + i * s.m * s.n, static_cast<blasint>(s.n));
    });
}

} // namespace detail

namespace {

struct operand_dims {
    std::size_t batch, rows, cols; // after transposition
    bool batched;
};

operand_dims dims_of(const Tensor& t, bool transpose, const char* name, const Tensor& a, const Tensor& b) {
    if (t.rank() != 2 && t.rank() != 3)
        throw shape_error(std::string("matmul: ") + name + " must have rank 2 or 3; shapes are " +
                          a.shape().to_string() + " and " + b.shape().to_string());
    const bool batched = t.rank() == 3;
    const std::size_t r = t.shape().dim(-2), c = t.shape().dim(-1);
    return {batched ? t.shape()[0] : 1, transpose ? c : r, transpose ? r : c, batched};
}

std::string shapes_of(const Tensor& a, const Tensor& b, const MatmulOptions& o) {
    return a.shape().to_string() + (o.transpose_a ? "ᵀ" : "") + " @ " + b.shape().to_string() +
           (o.transpose_b ? "ᵀ" : "");
}

/// Widens a tensor into a reusable float32 buffer (no copy for float32), on every thread the product
/// will run on.
const float* as_float32(const Tensor& t, std::vector<float>& scratch) {
    if (t.dtype() == Dtype::float32) return static_cast<const float*>(t.raw());
    float* wide = detail::grown(scratch, t.size());
    const auto* bytes = static_cast<const std::byte*>(t.raw());
    const std::size_t width = size_of(t.dtype());
    detail::split(t.size(), std::size_t{1} << 14, [&](std::size_t begin, std::size_t end) {
        widen(bytes + begin * width, t.dtype(), wide + begin, end - begin);
    });
    return wide;
}

/// Rows [r0, r1) of out from c, their float32 product (row r0 first, n columns): multiplied by alpha, the
/// bias added to each row, if any, and the rows rounded into out unless it is float32 (then c is out's
/// storage already), one part of `rounding`, which records out's whole rounding.
void finish_rows(float* c, float alpha, const float* bias, Tensor& out, std::size_t n, std::size_t r0, std::size_t r1,
                 RoundingBatch& rounding) {
    if (alpha != 1.0f)
        for (std::size_t i = 0; i < (r1 - r0) * n; ++i) c[i] *= alpha;
    if (bias != nullptr)
        for (std::size_t i = 0; i < r1 - r0; ++i)
            for (std::size_t j = 0; j < n; ++j) c[i * n + j] += bias[j];
    if (out.dtype() != Dtype::float32)
        narrow(c, static_cast<std::byte*>(out.raw()) + r0 * n * size_of(out.dtype()), (r1 - r0) * n, out.dtype(),
               rounding);
}

/// Rows [r0, r1) of a product whose batches stack into one matrix of rows (a not transposed, one b):
/// those rows of a widened, one sgemm against the widened b, then finish_rows.
void product_rows(const detail::gemm_shape& s, const Tensor& a, const float* b, float alpha, const float* bias,
                  Tensor& out, std::size_t r0, std::size_t r1, RoundingBatch& rounding, bool onednn) {
    thread_local std::vector<float> wa, wc;
    const std::size_t rows = r1 - r0, width = size_of(a.dtype());
    const float* pa = static_cast<const float*>(a.raw()) + r0 * s.k;
    if (a.dtype() != Dtype::float32) {
        float* wide = detail::grown(wa, rows * s.k);
        widen(static_cast<const std::byte*>(a.raw()) + r0 * s.k * width, a.dtype(), wide, rows * s.k);
        pa = wide;
    }
    float* c = kernels::detail::result_at(out, r0 * s.n, rows * s.n, wc);
    detail::sgemm({1, rows, s.n, s.k, false, s.transpose_b, false}, pa, b, c, onednn);
    finish_rows(c, alpha, bias, out, s.n, r0, r1, rounding);
}

/// A product is split by rows over the threads, each widening its rows of a (unless float32), multiplying
/// them (OpenBLAS runs on one thread inside a parallel region) and rounding its rows of the result, when it
/// has fewer multiply-adds than this, or when b has at most `small_b` elements, whatever its size: then
/// each thread packs all of b at little cost. OpenBLAS's own threading costs more than such a product is
/// worth: at 128x512x10 splitting by rows takes about half the time, and at the ViT's 2048x64x192,
/// 2048x64x64 and 2048x128x64 0.6 to 0.8 of it (two threads, AMD EPYC Zen 4), as one pass per thread
/// zeroes, packs and sums what OpenBLAS spreads over several. A large b goes to OpenBLAS's threads, which
/// split it rather than pack it whole on each (the MLP's step, with its 128x784x512 split by rows, ran 5-10%
/// slower).
constexpr std::size_t row_split_below = std::size_t{1} << 21, small_b = std::size_t{1} << 15;

/// The product of a and b as matmul makes it on the sgemm route (OpenBLAS's, or oneDNN's with `onednn`):
/// widened operands, float32 sums, then alpha, the bias and one rounding into a new `shape`, `dtype` tensor.
Tensor sgemm_route(const detail::gemm_shape& s, const Tensor& a, const Tensor& b, float alpha, const float* add,
                   const Shape& shape, Dtype dtype, bool onednn) {
    Tensor out = Tensor::uninitialized(shape, dtype);
    thread_local std::vector<float> wa, wb, wc;
    const std::size_t rows = s.batch * s.m;
    RoundingBatch rounding(out);
    if (!s.transpose_a && !s.batched_b && s.k != 0 && (rows * s.n * s.k < row_split_below || s.k * s.n <= small_b)) {
        const float* pb = as_float32(b, wb);
        detail::split(rows, 16, [&](std::size_t r0, std::size_t r1) {
            product_rows(s, a, pb, alpha, add, out, r0, r1, rounding, onednn);
        });
        return out;
    }
    float* c = kernels::detail::result_at(out, 0, out.size(), wc);
    if (s.k == 0) {
        std::fill(c, c + out.size(), 0.0f);
    } else {
        detail::sgemm(s, as_float32(a, wa), as_float32(b, wb), c, onednn);
    }
    if (alpha == 1.0f && add == nullptr && dtype == Dtype::float32) return out; // nothing to finish
    // the scale, the bias and the rounding on every thread (elementwise: the same bits however split)
    detail::split(
        rows, std::max<std::size_t>(1, (std::size_t{1} << 14) / std::max<std::size_t>(s.n, 1)),
        [&](std::size_t r0, std::size_t r1) { finish_rows(c + r0 * s.n, alpha, add, out, s.n, r0, r1, rounding); });
    return out;
}

} // namespace

Tensor kernels::matmul(const Tensor& a, const Tensor& b, MatmulOptions options, const Tensor* bias) {
    if (!options.out_dtype) check_same_dtype(a, b, "matmul");
    const Dtype out_dtype = options.out_dtype.value_or(a.dtype());
    const auto da = dims_of(a, options.transpose_a, "a", a, b);
    const auto db = dims_of(b, options.transpose_b, "b", a, b);
    if (da.cols != db.rows)
        throw shape_error("matmul: inner dimensions differ in " + shapes_of(a, b, options) + " (" +
                          std::to_string(da.cols) + " vs " + std::to_string(db.rows) + ")");
    if (db.batched && (!da.batched || da.batch != db.batch))
        throw shape_error("matmul: batch dimensions differ in " + shapes_of(a, b, options));

    const autodiff::detail::gemm_shape s{da.batch,  da.rows, db.cols, da.cols, options.transpose_a, options.transpose_b,
                                         db.batched};
    if (bias != nullptr) {
        if (bias->dtype() != out_dtype)
            throw dtype_error("matmul: the bias is " + std::string(name_of(bias->dtype())) + ", the result " +
                              std::string(name_of(out_dtype)));
        if (bias->shape() != Shape{db.cols})
            throw shape_error("matmul: bias " + bias->shape().to_string() + " does not match the " +
                              std::to_string(db.cols) + " output columns of " + shapes_of(a, b, options));
    }
    const Shape shape = da.batched ? Shape{s.batch, s.m, s.n} : Shape{s.m, s.n};
    if (shape.elements() == 0) return Tensor::uninitialized(shape, out_dtype);

    const bool bf16_only = a.dtype() == Dtype::bfloat16 && b.dtype() == Dtype::bfloat16 &&
                           out_dtype == Dtype::bfloat16 && options.alpha == 1.0f;
    if (options.backend == MatmulBackend::onednn && !(bf16_only && autodiff::detail::onednn_bf16_available()))
        throw std::invalid_argument(
            "matmul: the onednn backend needs bfloat16 operands and result, alpha 1, and the avx512_bf16 "
            "instruction-set level or above");
    const bool use_onednn =
        bf16_only && (options.backend == MatmulBackend::onednn ||
                      (options.backend == MatmulBackend::automatic && autodiff::detail::onednn_bf16_available()));

    if (use_onednn && s.k != 0) { // oneDNN adds the bias and rounds (see the header)
        Tensor out = Tensor::uninitialized(shape, out_dtype);
        autodiff::detail::onednn_matmul_bf16(s, a.raw(), b.raw(), out.raw(), true,
                                             bias != nullptr ? bias->raw() : nullptr);
        return out;
    }
    const std::vector<float> bias_floats = bias != nullptr ? bias->to_floats() : std::vector<float>{};
    const float* add = bias != nullptr ? bias_floats.data() : nullptr;
    const auto product = [&](bool onednn) {
        return sgemm_route(s, a, b, options.alpha, add, shape, out_dtype, onednn);
    };
    const Float32Gemm library = float32_gemm();
    if (library == Float32Gemm::automatic) return product(automatic_gemm_takes_onednn(s.batched_b));
    // Measured at the first product of each shape, outside parallel regions (a pause of the rounding
    // telemetry is made and ended on one thread); OpenBLAS inside them.
    if (library != Float32Gemm::measured) return product(library == Float32Gemm::onednn);
    if (omp_in_parallel()) return product(false);
    const std::string key = "matmul " + shapes_of(a, b, options) + " " + std::string(name_of(a.dtype())) +
                            (a.dtype() != b.dtype() || out_dtype != a.dtype()
                                 ? " by " + std::string(name_of(b.dtype())) + " to " + std::string(name_of(out_dtype))
                                 : "");
    return autodiff::detail::run_fastest(key, {name_of(Float32Gemm::openblas), name_of(Float32Gemm::onednn)},
                                         [&](std::size_t i) { return product(i == 1); });
}

namespace {

constexpr detail::name_table<Float32Gemm, 4> gemm_names{{{Float32Gemm::automatic, "automatic"},
                                                         {Float32Gemm::openblas, "openblas"},
                                                         {Float32Gemm::onednn, "onednn"},
                                                         {Float32Gemm::measured, "measured"}}};

/// The process's float32 GEMM library, read from MIXPREC_GEMM at first use.
std::atomic<Float32Gemm>& process_gemm() {
    return detail::process_choice("MIXPREC_GEMM", Float32Gemm::automatic, float32_gemm_named);
}

} // namespace

bool automatic_gemm_takes_onednn(bool batch_of_products) { return !batch_of_products && isa() >= Isa::avx512; }

std::string_view name_of(Float32Gemm library) { return detail::name_in(gemm_names, library); }

Float32Gemm float32_gemm_named(std::string_view name) {
    return detail::named_in(gemm_names, name, "float32 GEMM library");
}

Float32Gemm float32_gemm() { return process_gemm().load(std::memory_order_relaxed); }

void set_float32_gemm(Float32Gemm library) { process_gemm().store(library, std::memory_order_relaxed); }

void set_blas_threads(int threads) {
    if (threads < 1)
        throw std::invalid_argument("set_blas_threads: threads must be at least 1, got " + std::to_string(threads));
    openblas_set_num_threads(threads);
    detail::onednn_set_threads(threads);
}

} // namespace mixprec::autodiff
