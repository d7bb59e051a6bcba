#include "parallel/mpi_runtime.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace dlbench::parallel {

namespace {

const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MPI_LOCALNRANKS",
                           "MV2_COMM_WORLD_SIZE"}) {
    if (environment(name) != nullptr) return true;
  }
  return false;
}

std::optional<int> launcher_local_rank() {
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* value = environment(name)) return std::atoi(value);
  }
  return std::nullopt;
}

#if DLBENCH_WITH_MPI

void throw_mpi_failure(const char* file, int line, const char* what, int code) {
  char message[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, message, &length) != MPI_SUCCESS) std::snprintf(message, sizeof message, "?");
  throw_check_failure(file, line, what, fmt::format("MPI error {}: {}", code, message));
}

namespace {

void finalize_at_exit() {
  if (mpi_active()) MPI_Finalize();
}

}  // namespace

void wait_polling(MPI_Request* requests, int count) {
  for (int spins = 0;; ++spins) {
    int done = 0;
    MPI_CHECK(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    if (spins < 100) continue;
    if (spins < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void ensure_mpi_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_CHECK(MPI_Initialized(&initialized));
    if (initialized) return;  // someone else's (a test's main): theirs to finalise
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    DLB_CHECK(provided >= MPI_THREAD_MULTIPLE,
              "MPI gives thread level {} but the watchdog needs MPI_THREAD_MULTIPLE ({})", provided,
              MPI_THREAD_MULTIPLE);
    // Errors come back as codes (MPI_CHECK turns them into messages) instead of aborting inside MPI.
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    std::atexit(finalize_at_exit);
  });
}

int shared_memory_local_rank() {
  ensure_mpi_initialized();
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(node, &rank));
  MPI_CHECK(MPI_Comm_free(&node));
  return rank;
}

int node_local_rank() {
  ensure_mpi_initialized();
  if (const std::optional<int> launcher = launcher_local_rank()) return *launcher;
  return shared_memory_local_rank();
}

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int finish_mpi_process(int exit_code) {
  if (!mpi_active()) return exit_code;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) {
    // Every rank ends here, successful or not: a barrier of its own on MPI_COMM_WORLD (which the
    // communicators never use) meets only the other ranks' ends. A rank that failed alone does not find
    // them, and stops the job rather than leave them waiting for it.
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(exit_code == 0 ? 60 : 5);
    int done = 0;
    while (!done && std::chrono::steady_clock::now() < deadline) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::fflush(stdout);
    std::fflush(stderr);
    if (!done) MPI_Abort(MPI_COMM_WORLD, exit_code == 0 ? 3 : exit_code);
  }
  MPI_Finalize();
  return exit_code;
}

void abort_all_ranks(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

#else

void throw_mpi_failure(const char* file, int line, const char* what, int code) {
  throw_check_failure(file, line, what, fmt::format("MPI error {}", code));
}
bool mpi_active() { return false; }
int finish_mpi_process(int exit_code) { return exit_code; }
void abort_all_ranks(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exit_code);
}

#endif

}  // namespace dlbench::parallel
