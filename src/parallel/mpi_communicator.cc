// The mpi communicator: CPU ranks, one process each under mpirun.
#if DLBENCH_WITH_MPI

#include <mpi.h>

#include <algorithm>

#include "core/status.h"
#include "parallel/communicators.h"
#include "parallel/mpi_control.h"
#include "parallel/mpi_runtime.h"
#include "parallel/mpi_watchdog.h"

namespace dlbench::parallel {

namespace {

int world_rank() {
  ensure_mpi_initialized();
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(std::shared_ptr<ProgressTracker> progress)
      : Communicator(progress), control_(MPI_COMM_WORLD, progress) {
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &data_));
    MPI_CHECK(MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN));
    watchdog_ = std::make_unique<MpiWatchdog>(MPI_COMM_WORLD, progress, std::vector<Probe>{},
                                              std::vector<std::function<void()>>{});
  }
  ~MpiCommunicator() override {
    watchdog_.reset();  // collective: every rank is here
    if (pending_.empty()) MPI_Comm_free(&data_);
  }

  std::string name() const override { return "mpi"; }
  int rank() const override { return control_.rank(); }
  int size() const override { return control_.size(); }

  void all_reduce_sum(Tensor& x) override {
    check_reducible("mpi all_reduce_sum", x);
    DLB_CHECK(x.device().kind == DeviceKind::cpu, "mpi all_reduce_sum: {} is not in host memory",
              x.describe());
    DLB_REQUIRE(x.dtype() == DType::f32,
                "the mpi communicator sums f32 tensors only (CPU ranks train in fp32), not {}",
                dtype_name(x.dtype()));
    last_sequence_ = progress().begin(OpKind::all_reduce);
    auto* data = x.ptr<float>();
    const size_t count = static_cast<size_t>(x.numel());
    for (size_t done = 0; done < count; done += kMpiMaxCount) {
      MPI_Request request = MPI_REQUEST_NULL;
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + done,
                               static_cast<int>(std::min(kMpiMaxCount, count - done)), MPI_FLOAT, MPI_SUM,
                               data_, &request));
      pending_.push_back(request);
    }
  }

  void wait_all_reduces() override {
    if (pending_.empty()) return;
    wait_polling(pending_.data(), static_cast<int>(pending_.size()));
    pending_.clear();
    progress().finish_through(last_sequence_);
  }

  void broadcast(Tensor& x, int root) override {
    DLB_CHECK(root >= 0 && root < size(), "broadcast from rank {} of {}", root, size());
    DLB_CHECK(x.device().kind == DeviceKind::cpu, "mpi broadcast: {} is not in host memory", x.describe());
    control_.broadcast_bytes(x.data(), x.bytes(), root);
  }

  void barrier() override { control_.barrier(); }
  double sum(double value) override { return control_.sum(value); }
  double max(double value) override { return control_.max(value); }
  std::vector<std::string> all_gather(const std::string& value) override {
    return control_.all_gather(value);
  }

 private:
  MpiControlPlane control_;
  MPI_Comm data_ = MPI_COMM_NULL;
  std::vector<MPI_Request> pending_;
  int64_t last_sequence_ = 0;
  std::unique_ptr<MpiWatchdog> watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds) {
  DLB_CHECK(timeout_seconds > 0, "timeout {} s", timeout_seconds);
  return std::make_unique<MpiCommunicator>(std::make_shared<ProgressTracker>(world_rank(), timeout_seconds));
}

}  // namespace dlbench::parallel

#endif
