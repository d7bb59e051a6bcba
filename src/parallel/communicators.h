// The communicator implementations, each behind a factory (parallel/launch.h chooses among them).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "parallel/communicator.h"
#include "parallel/launch.h"

namespace dlbench::parallel {

// One rank: the data plane does nothing, the control plane returns what it is given.
std::unique_ptr<Communicator> make_local_communicator();

#if DLBENCH_WITH_MPI
// CPU ranks under mpirun (MPI_COMM_WORLD): MPI_Iallreduce per all_reduce_sum, f32 only. Collective.
std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds);
#endif

#if DLBENCH_WITH_MPI && DLBENCH_WITH_CUDA
// One GPU per process under mpirun: NCCL (bootstrapped over MPI) for tensors on `backend`'s GPU, MPI for
// the control plane. Collective.
std::unique_ptr<Communicator> make_mpi_nccl_communicator(Backend& backend, double timeout_seconds,
                                                         const NcclTuning& nccl);
#endif

}  // namespace dlbench::parallel
