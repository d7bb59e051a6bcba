// The mpi-nccl communicator: one process per GPU under mpirun (the Horovod way). MPI starts the ranks and
// carries the control plane; rank 0's ncclUniqueId reaches the others over MPI; tensors go through NCCL.
#if DLBENCH_WITH_MPI && DLBENCH_WITH_CUDA

#include <mpi.h>
#include <nccl.h>

#include "backend/cuda/cuda_check.h"
#include "parallel/communicators.h"
#include "parallel/mpi_control.h"
#include "parallel/mpi_runtime.h"
#include "parallel/mpi_watchdog.h"
#include "parallel/nccl_check.h"
#include "parallel/nccl_data_plane.h"

namespace dlbench::parallel {

namespace {

class MpiNcclCommunicator final : public Communicator {
 public:
  MpiNcclCommunicator(Backend& backend, std::shared_ptr<ProgressTracker> progress, const NcclTuning& nccl)
      : Communicator(progress), control_(MPI_COMM_WORLD, progress) {
    ncclUniqueId id{};
    if (control_.rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    control_.broadcast_bytes(&id, sizeof id, 0);
    ncclConfig_t config = nonblocking_nccl_config(nccl);
    CUDA_CHECK(cudaSetDevice(backend.device().index));
    ncclComm_t comm = nullptr;
    const ncclResult_t init = ncclCommInitRankConfig(&comm, control_.size(), id, control_.rank(), &config);
    NCCL_CHECK(init);
    settle(comm, init, "ncclCommInitRankConfig");
    data_ = std::make_shared<NcclDataPlane>(comm, backend, progress, nccl);
    std::weak_ptr<NcclDataPlane> weak = data_;
    watchdog_ = std::make_unique<MpiWatchdog>(MPI_COMM_WORLD, progress,
                                              std::vector<Probe>{[weak]() -> std::optional<std::string> {
                                                if (auto d = weak.lock()) return d->probe();
                                                return std::nullopt;
                                              }},
                                              std::vector<std::function<void()>>{[weak] {
                                                if (auto d = weak.lock()) d->abort();
                                              }});
  }
  ~MpiNcclCommunicator() override { watchdog_.reset(); }  // collective: every rank is here

  std::string name() const override { return "mpi-nccl"; }
  int rank() const override { return control_.rank(); }
  int size() const override { return control_.size(); }
  void all_reduce_sum(Tensor& x) override { data_->all_reduce_sum(x); }
  void wait_all_reduces() override { data_->wait_all_reduces(); }
  void broadcast(Tensor& x, int root) override {
    DLB_CHECK(root >= 0 && root < size(), "broadcast from rank {} of {}", root, size());
    data_->broadcast(x, root);
  }
  void watch_compute_stream() override { data_->watch_compute_stream(); }
  void* allocate_window(size_t bytes) override { return data_->allocate_window(bytes); }
  void barrier() override { control_.barrier(); }
  double sum(double value) override { return control_.sum(value); }
  double max(double value) override { return control_.max(value); }
  std::vector<std::string> all_gather(const std::string& value) override {
    return control_.all_gather(value);
  }

 private:
  MpiControlPlane control_;
  std::shared_ptr<NcclDataPlane> data_;
  std::unique_ptr<MpiWatchdog> watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_nccl_communicator(Backend& backend, double timeout_seconds,
                                                         const NcclTuning& nccl) {
  DLB_CHECK(timeout_seconds > 0, "timeout {} s", timeout_seconds);
  ensure_mpi_initialized();
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return std::make_unique<MpiNcclCommunicator>(
      backend, std::make_shared<ProgressTracker>(rank, timeout_seconds), nccl);
}

}  // namespace dlbench::parallel

#endif
