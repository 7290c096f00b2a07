#pragma once
/// GradientExchange: the data-parallel step's reduction. Each rank's gradients (still multiplied by the
/// loss scale) are summed across the ranks of a Communicator in buckets, then unscaled and averaged in the
/// one pass that also checks them (amp/unscale.hpp):
///
///   g = (Σ_r g_r) · ((1/S) / N)          Σ over the N ranks; S the scale the gradient carries
///
/// Every rank ends with the same bits, so the finiteness check, the norm and the step agree everywhere:
/// an inf or NaN on one rank reaches every rank's sum, and the step is skipped on all of them.
///
/// | transport | what travels | numerics |
/// |---|---|---|
/// | float32 (default) | each gradient widened exactly to float32, 4 bytes a value | the sum rounds each addition to float32, as a single process summing N micro-batches would |
/// | compute | 16-bit gradients (float16, bfloat16, cbfloat16) as the tape rounded them, 2 bytes a value; others in float32 | each addition is rounded to the 16-bit format: N−1 more roundings per value, and a sum of N scaled gradients overflows N times sooner (the step is then skipped and the loss scale backs off, as for any overflow) |
///
/// With N a power of two and S a power of two, (1/S)/N is exact and the pass is one multiplication; for
/// other N it is rounded once more. Buckets are consecutive stretches of at most `bucket_bytes` of the
/// packed gradients (Horovod's fusion buffer, PyTorch DDP's bucket_cap_mb): one all-reduce each.

#include <mixprec/amp/unscale.hpp>
#include <mixprec/optim/communicator.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace mixprec::amp {

enum class GradientTransport : std::uint8_t {
    float32, ///< widened to float32, summed in float32
    compute, ///< in the dtype the gradients were rounded to (16-bit floats stay 16-bit)
};

/// Parses "float32" or "compute"; std::invalid_argument naming both otherwise.
GradientTransport parse_gradient_transport(std::string_view name);

struct DataParallelOptions {
    GradientTransport transport = GradientTransport::float32;
    std::size_t bucket_bytes = std::size_t{25} << 20; ///< the fusion buffer, ≥ 1024 bytes
};

class GradientExchange {
  public:
    /// std::invalid_argument for a null communicator or a bucket under 1024 bytes.
    GradientExchange(std::shared_ptr<optim::Communicator> communicator, DataParallelOptions options = {});

    /// out[i] = (Σ_r grads[i]) · inverse_scales[i] / N as float32 (out resized); all ranks call it with
    /// gradients of the same shapes and dtypes. Returns whether all are finite and their squared norm.
    UnscaleResult reduce(const std::vector<autodiff::Tensor>& grads, std::span<const float> inverse_scales,
                         std::vector<std::vector<float>>& out);
    /// The same for float32 gradients, in place (always summed in float32).
    UnscaleResult reduce(std::vector<std::vector<float>>& grads, std::span<const float> inverse_scales);

    optim::Communicator& communicator() const { return *communicator_; }
    const DataParallelOptions& options() const { return options_; }
    /// Bytes each rank contributed to the last reduction's all-reduces.
    std::size_t last_bytes() const { return last_bytes_; }

  private:
    struct Segment {
        autodiff::Dtype dtype; ///< as it travels: float32 or a 16-bit float
        std::size_t offset;    ///< in the buffer of that dtype, in values
        std::size_t size;
    };
    /// Places n gradients of these dtypes and sizes in the buffers (grows them).
    void lay_out(std::size_t n, const auto& dtype_of, const auto& size_of);
    void exchange();
    UnscaleResult unscale_all(std::span<const float> inverse_scales, std::vector<std::vector<float>>& out);
    const void* data_of(const Segment& s) const;
    void* data_of(const Segment& s);

    std::shared_ptr<optim::Communicator> communicator_;
    DataParallelOptions options_;
    std::vector<Segment> segments_;
    std::vector<float> floats_;
    std::array<std::vector<std::uint16_t>, autodiff::dtype_count> halves_; ///< by dtype
    std::size_t last_bytes_ = 0;
};

} // namespace mixprec::amp
