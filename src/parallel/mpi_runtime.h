// The MPI side of a process: whether mpirun started it, its place among the node's processes, MPI's
// initialisation (once per process, with MPI_THREAD_MULTIPLE: the watchdog thread talks too) and its end.
//
// Everything here but MPI_CHECK compiles without MPI, so that launch code can ask `launched_by_mpi()` in any
// build and say clearly that this build has no MPI.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "core/status.h"

#if DLBENCH_WITH_MPI
#include <mpi.h>
#endif

namespace dlbench::parallel {

// True when an MPI launcher (mpirun/mpiexec of OpenMPI, MPICH's Hydra, srun with PMI/PMIx) started this
// process: it set OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK or a relative of them.
bool launched_by_mpi();
// This process's index among the launcher's processes on this node (OMPI_COMM_WORLD_LOCAL_RANK,
// MPI_LOCALRANKID, SLURM_LOCALID...); nullopt when none says. The one place that reads them.
std::optional<int> launcher_local_rank();

#if DLBENCH_WITH_MPI
// Waits for `requests` by polling MPI_Testall (spinning briefly, then yielding the core: ranks may share
// cores), so that the rank's watchdog thread keeps its share of MPI and of the CPU.
void wait_polling(MPI_Request* requests, int count);
// Initialises MPI once per process (MPI_THREAD_MULTIPLE) and arranges MPI_Finalize at exit. Throws when the
// library cannot give MPI_THREAD_MULTIPLE.
void ensure_mpi_initialized();
// This process's index among the processes on its node: the launcher's local rank, else its rank in
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (collective then: every rank calls it). Initialises MPI.
int node_local_rank();
// The index MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) gives this process (collective).
int shared_memory_local_rank();
#endif
bool mpi_active();  // initialised and not finalised

// What main does last under MPI, with the exit code it chose: every rank meets the others' ends (a bad
// flag fails them all, and each has printed its line), then MPI_Finalize. A rank that does not find the
// others within a few seconds (it failed alone, they wait for it) stops the job with MPI_Abort. Returns
// the exit code. Does nothing without MPI.
int finish_mpi_process(int exit_code);

// MPI_Abort(MPI_COMM_WORLD, code) where MPI is active, else std::_Exit(code). Never returns.
[[noreturn]] void abort_all_ranks(int exit_code);

[[noreturn]] void throw_mpi_failure(const char* file, int line, const char* what, int code);

}  // namespace dlbench::parallel

// MPI_CHECK(MPI_Allreduce(...)): the call must return MPI_SUCCESS (the communicators set MPI_ERRORS_RETURN
// so that errors come back here with MPI_Error_string's message).
#define MPI_CHECK(expr)                                                               \
  do {                                                                                \
    const int mpi_status_ = (expr);                                                   \
    if (mpi_status_ != 0) {                                                           \
      ::dlbench::parallel::throw_mpi_failure(__FILE__, __LINE__, #expr, mpi_status_); \
    }                                                                                 \
  } while (0)
