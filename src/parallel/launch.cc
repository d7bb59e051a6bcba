#include "parallel/launch.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "parallel/communicators.h"
#include "parallel/mpi_runtime.h"
#include "parallel/placement.h"

#if DLBENCH_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#include "parallel/nccl_threads.h"
#endif

namespace dlbench::parallel {

Launcher parse_launcher(const std::string& text) {
  if (text == "auto") return Launcher::automatic;
  if (text == "threads") return Launcher::threads;
  if (text == "mpi") return Launcher::mpi;
  throw_user_error("--launcher {}: unknown; choose auto, threads or mpi", text);
}

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::automatic:
      return "auto";
    case Launcher::threads:
      return "threads";
    case Launcher::mpi:
      return "mpi";
  }
  return "?";
}

namespace {

class SingleLaunch final : public Launch {
 public:
  explicit SingleLaunch(DeviceKind device) : device_(device) {}
  std::string launcher() const override { return "single"; }
  std::string communicator() const override { return "local"; }
  int local_ranks() const override { return 1; }
  int gpu(int slot) const override { return 0; }
  int node_local_rank(int slot) const override { return 0; }
  std::unique_ptr<Communicator> join(int slot, Backend& backend) override {
    DLB_CHECK(slot == 0, "local rank {} of 1", slot);
    return make_local_communicator();
  }

 private:
  DeviceKind device_;
};

#if DLBENCH_WITH_MPI
class MpiLaunch final : public Launch {
 public:
  MpiLaunch(DeviceKind device, double timeout_seconds, const NcclTuning& nccl)
      : device_(device),
        timeout_seconds_(timeout_seconds),
        nccl_(nccl),
        local_rank_(parallel::node_local_rank()) {
#if DLBENCH_WITH_CUDA
    // By the process's place on its node, never its global rank (8..15 on the second 8-GPU node).
    if (device == DeviceKind::cuda) gpu_ = gpu_of_local_rank(local_rank_, cuda_device_count(), this_host());
#endif
  }
  std::string launcher() const override { return "mpi"; }
  std::string communicator() const override { return device_ == DeviceKind::cuda ? "mpi-nccl" : "mpi"; }
  int local_ranks() const override { return 1; }
  int gpu(int slot) const override { return gpu_; }
  int node_local_rank(int slot) const override { return local_rank_; }
  std::unique_ptr<Communicator> join(int slot, Backend& backend) override {
    DLB_CHECK(slot == 0, "local rank {} of 1", slot);
#if DLBENCH_WITH_CUDA
    if (device_ == DeviceKind::cuda) return make_mpi_nccl_communicator(backend, timeout_seconds_, nccl_);
#endif
    return make_mpi_communicator(timeout_seconds_);
  }

 private:
  DeviceKind device_;
  double timeout_seconds_;
  NcclTuning nccl_;
  int local_rank_ = 0;
  int gpu_ = 0;
};
#endif

#if DLBENCH_WITH_CUDA
class ThreadsLaunch final : public Launch {
 public:
  ThreadsLaunch(int gpus, double timeout_seconds, const NcclTuning& nccl)
      : group_(gpus, timeout_seconds, nccl) {}
  std::string launcher() const override { return "threads"; }
  std::string communicator() const override { return "nccl-threads"; }
  int local_ranks() const override { return group_.size(); }
  int gpu(int slot) const override { return slot; }
  int node_local_rank(int slot) const override { return slot; }
  std::unique_ptr<Communicator> join(int slot, Backend& backend) override {
    return group_.join(slot, backend);
  }
  void abort(const std::string& reason) override { group_.abort(reason); }

 private:
  NcclThreadsGroup group_;
};
#endif

}  // namespace

std::unique_ptr<Launch> make_launch(const LaunchOptions& options) {
  const Launcher launcher = options.launcher;
  DLB_REQUIRE(options.timeout_seconds > 0, "--timeout {}: must be a positive number of seconds",
              options.timeout_seconds);
  DLB_REQUIRE(options.gpus >= 1, "--gpus {}: must be at least 1", options.gpus);
  const bool cuda = options.device == DeviceKind::cuda;
  const bool under_mpi = launched_by_mpi();
#if !DLBENCH_WITH_CUDA
  DLB_REQUIRE(!cuda, "--device cuda: this build has no CUDA backend (rebuild with nvcc on PATH)");
#endif
  DLB_REQUIRE(cuda || options.gpus == 1,
              "--gpus {} needs --device cuda; CPU ranks run one per process: mpirun -np {} dlbench ...",
              options.gpus, options.gpus);

  bool use_mpi = launcher == Launcher::mpi || (launcher == Launcher::automatic && under_mpi);
  if (use_mpi) {
#if DLBENCH_WITH_MPI
    DLB_REQUIRE(under_mpi,
                "--launcher mpi: this process was not started by mpirun; run mpirun -np N dlbench ...");
    DLB_REQUIRE(
        options.gpus == 1,
        "--gpus {} under mpirun: ranks are processes there, one GPU each (mpirun -np {} ...); leave out "
        "--gpus or use --launcher threads without mpirun",
        options.gpus, options.gpus);
    return std::make_unique<MpiLaunch>(options.device, options.timeout_seconds, options.nccl);
#else
    throw_user_error("{}: this build has no MPI; rebuild with OpenMPI installed (-DDLBENCH_WITH_MPI=ON){}",
                     launcher == Launcher::mpi ? "--launcher mpi" : "started by mpirun",
                     launcher == Launcher::mpi ? "" : ", or run without mpirun");
#endif
  }
  DLB_REQUIRE(
      !(launcher == Launcher::threads && under_mpi),
      "--launcher threads under mpirun: start one process (no mpirun) with --gpus N, or use --launcher mpi");
#if DLBENCH_WITH_CUDA
  // --launcher threads with one GPU still runs NCCL (a one-rank group): the path of --gpus N, checkable on
  // a machine with one GPU.
  if (cuda && (options.gpus > 1 || launcher == Launcher::threads))
    return std::make_unique<ThreadsLaunch>(options.gpus, options.timeout_seconds, options.nccl);
#endif
  return std::make_unique<SingleLaunch>(options.device);
}

std::unique_ptr<Communicator> make_communicator(const LaunchOptions& options, Backend& backend) {
  auto launch = make_launch(options);
  DLB_REQUIRE(launch->local_ranks() == 1,
              "{} ranks in one process ({} launcher): each needs its own thread (run_local_ranks)",
              launch->local_ranks(), launch->launcher());
  return launch->join(0, backend);
}

void run_local_ranks(Launch& launch, const std::function<void(int slot)>& body) {
  const int n = launch.local_ranks();
  if (n == 1) {
    body(0);
    return;
  }
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int slot = 0; slot < n; ++slot) {
    threads.emplace_back([&, slot] {
      try {
        body(slot);
      } catch (const std::exception& e) {
        bool is_first = false;
        {
          std::lock_guard lock(mutex);
          if (!first) {
            first = std::current_exception();
            is_first = true;
          }
        }
        if (is_first) launch.abort(fmt::format("rank {}: {}", slot, e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace dlbench::parallel
