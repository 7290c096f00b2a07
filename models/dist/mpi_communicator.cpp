#include <mixprec/models/dist/mpi_communicator.hpp>

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mixprec::models {
namespace {

/// MPI counts are ints: a longer span goes in pieces.
constexpr std::size_t piece = std::size_t{1} << 30;

template <autodiff::Dtype D>
void add_16_bit(void* in, void* in_out, int* length, MPI_Datatype*) {
    optim::add_16_bit(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(in_out),
                      static_cast<std::size_t>(*length), D);
}

/// The user operation summing 16-bit floats of each dtype, created once MPI is up (freed by MPI_Finalize).
MPI_Op sum_op(autodiff::Dtype dtype) {
    static MPI_Op ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
    const int i = dtype == autodiff::Dtype::float16 ? 0 : dtype == autodiff::Dtype::bfloat16 ? 1 : 2;
    if (ops[i] == MPI_OP_NULL) {
        MPI_User_function* f = i == 0   ? add_16_bit<autodiff::Dtype::float16>
                               : i == 1 ? add_16_bit<autodiff::Dtype::bfloat16>
                                        : add_16_bit<autodiff::Dtype::cbfloat16>;
        MPI_Op_create(f, /*commute=*/1, &ops[i]);
    }
    return ops[i];
}

template <class T>
void all_reduce(std::span<T> values, MPI_Datatype type, MPI_Op op) {
    for (std::size_t i = 0; i < values.size(); i += piece)
        MPI_Allreduce(MPI_IN_PLACE, values.data() + i, static_cast<int>(std::min(piece, values.size() - i)), type, op,
                      MPI_COMM_WORLD);
}

int environment_int(const char* name) {
    const char* text = std::getenv(name);
    return text ? std::atoi(text) : 0;
}

} // namespace

bool MpiCommunicator::launched() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
        if (std::getenv(name)) return true;
    return false;
}

MpiCommunicator::MpiCommunicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            throw std::runtime_error("MpiCommunicator: MPI could not be initialized");
        finalize_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiCommunicator::~MpiCommunicator() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalize_ && !finalized) MPI_Finalize();
}

int MpiCommunicator::local_size() const {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
        if (const int n = environment_int(name); n > 0) return n;
    return 1;
}

void MpiCommunicator::sum(std::span<float> values) { all_reduce(values, MPI_FLOAT, MPI_SUM); }

void MpiCommunicator::sum(std::span<double> values) { all_reduce(values, MPI_DOUBLE, MPI_SUM); }

void MpiCommunicator::sum(std::span<std::uint16_t> values, autodiff::Dtype dtype) {
    if (!optim::is_16_bit_float(dtype)) optim::SingleProcess{}.sum(values, dtype); // throws, naming the dtype
    all_reduce(values, MPI_UINT16_T, sum_op(dtype));
}

void MpiCommunicator::max(std::span<float> values) { all_reduce(values, MPI_FLOAT, MPI_MAX); }

std::vector<std::uint64_t> MpiCommunicator::gather(std::uint64_t value) {
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
    MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    return all;
}

void MpiCommunicator::abort(int code) const {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code); // MPI_Abort does not return; this is for the compiler
}

} // namespace mixprec::models
