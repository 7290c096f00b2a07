#pragma once
/// Communicator: what data-parallel training needs from the processes it runs on, whatever carries it.
/// models::MpiCommunicator (models/dist/, built when MPI is found) implements it over MPI_COMM_WORLD;
/// SingleProcess is the one-process case, where every reduction leaves its values as they are.
///
/// Data-parallel training, as an optimizer and fit use a communicator of N ranks:
///   every rank holds the same weights and optimizer state; each computes the gradients of its share of
///   the global batch; the (loss-scaled) gradients are summed across ranks and divided by N; every rank
///   then takes the same step, so the states stay identical — skipped together when the sum is not
///   finite (an inf or NaN on any rank reaches every rank's sum).
///
/// Every call is collective: all ranks make the same calls in the same order with the same sizes.
/// Reductions give every rank the same bits.

#include <mixprec/autodiff/tensor/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace mixprec::optim {

class Communicator {
  public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0; ///< 0 ... size() − 1
    virtual int size() const = 0; ///< ≥ 1

    /// values[i] ← Σ over ranks of values[i], each addition in float32.
    virtual void sum(std::span<float> values) = 0;
    /// The same in double (figures, counts up to 2^53).
    virtual void sum(std::span<double> values) = 0;
    /// The same for 16-bit floats of `dtype` (float16, bfloat16, cbfloat16) as stored: each addition
    /// widens both terms exactly, adds in float32 and rounds once back to `dtype` (to nearest even; an
    /// overflow gives inf). std::invalid_argument for other dtypes.
    virtual void sum(std::span<std::uint16_t> values, autodiff::Dtype dtype) = 0;
    /// values[i] ← max over ranks of values[i] (a NaN anywhere gives NaN).
    virtual void max(std::span<float> values) = 0;
    /// `value` of every rank, in rank order, on every rank.
    virtual std::vector<std::uint64_t> gather(std::uint64_t value) = 0;

  protected:
    Communicator() = default;
    Communicator(const Communicator&) = default;
    Communicator& operator=(const Communicator&) = default;
};

/// One process: rank 0 of 1. Every reduction leaves the values as they are.
class SingleProcess final : public Communicator {
  public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    void sum(std::span<float>) override {}
    void sum(std::span<double>) override {}
    void sum(std::span<std::uint16_t>, autodiff::Dtype dtype) override;
    void max(std::span<float>) override {}
    std::vector<std::uint64_t> gather(std::uint64_t value) override { return {value}; }
};

/// Whether `dtype` travels as 16 bits in Communicator::sum (float16, bfloat16, cbfloat16).
bool is_16_bit_float(autodiff::Dtype dtype);

/// out[i] = round_dtype(widen(a[i]) + widen(b[i])) for 16-bit floats of `dtype` (what an implementation
/// of the 16-bit sum applies at each addition). std::invalid_argument unless is_16_bit_float(dtype).
void add_16_bit(const std::uint16_t* a, std::uint16_t* b_and_out, std::size_t n, autodiff::Dtype dtype);

/// Where rank `rank` of `ranks` begins in n items split into contiguous shares as even as they come:
/// share r is [share_begin(n, r, N), share_begin(n, r + 1, N)), of ⌊n/N⌋ or ⌈n/N⌉ items.
inline std::size_t share_begin(std::size_t n, int rank, int ranks) {
    return n * static_cast<std::size_t>(rank) / static_cast<std::size_t>(ranks);
}

} // namespace mixprec::optim
