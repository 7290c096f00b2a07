#pragma once
/// MpiCommunicator: data-parallel training over MPI (optim/communicator.hpp says what a communicator does).
/// It lives in its own library, mixprec::mpi (libmixprec_mpi), built when CMake finds an MPI (Debian:
/// libopenmpi-dev), so that only programs that link it need MPI.
///
///   mpirun -np 2 ./train                       # every rank runs the same program
///
///   auto world = std::make_shared<models::MpiCommunicator>();
///   optimizer.set_communicator(world);         // amp::LossScaleOptimizer: gradients averaged over ranks
///   models::fit(model, optimizer, data, state, options);   // each rank trains on its share of each batch
///   if (world->rank() == 0) ...                // write files from one rank only
///
/// Collectives are MPI_Allreduce and MPI_Allgather on MPI_COMM_WORLD, in place; 16-bit floats are summed by
/// a commutative user operation that rounds each addition once (optim::add_16_bit). Every rank receives the
/// same bits: MPI computes each reduced element once and sends it, or combines the same operands with a
/// commutative operation on every rank. A rank that dies makes mpirun end the others (MPI's default error
/// handler); a rank that fails on its own must call abort(), or the others would wait in a collective.

#include <mixprec/optim/communicator.hpp>

namespace mixprec::models {

class MpiCommunicator final : public optim::Communicator {
  public:
    /// Initializes MPI unless something did already (then it is left to that code to finalize).
    /// std::runtime_error if MPI cannot be initialized.
    MpiCommunicator();
    /// Finalizes MPI if this object initialized it.
    ~MpiCommunicator() override;
    MpiCommunicator(const MpiCommunicator&) = delete;
    MpiCommunicator& operator=(const MpiCommunicator&) = delete;

    /// Whether this process was started by an MPI launcher (mpirun / mpiexec of Open MPI or MPICH, or a
    /// PMIx launcher such as srun), read from the environment the launcher sets: without one a program
    /// can train as one process without initializing MPI at all.
    static bool launched();

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    /// The ranks on this host, as the launcher says (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS), else 1.
    int local_size() const;
    void sum(std::span<float> values) override;
    void sum(std::span<double> values) override;
    void sum(std::span<std::uint16_t> values, autodiff::Dtype dtype) override;
    /// Values must not be NaN (MPI_MAX does not say how it orders them).
    void max(std::span<float> values) override;
    std::vector<std::uint64_t> gather(std::uint64_t value) override;
    /// Ends every rank of the job with `code` (MPI_Abort): for an error on one rank only.
    [[noreturn]] void abort(int code) const;

  private:
    int rank_ = 0, size_ = 1;
    bool finalize_ = false;
};

} // namespace mixprec::models
