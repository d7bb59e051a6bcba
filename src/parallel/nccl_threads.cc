#include "parallel/nccl_threads.h"

#if DLBENCH_WITH_CUDA

#include <nccl.h>

#include <utility>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "parallel/nccl_check.h"
#include "parallel/nccl_data_plane.h"

namespace dlbench::parallel {

namespace {

class NcclThreadsCommunicator final : public Communicator {
 public:
  NcclThreadsCommunicator(int rank, std::shared_ptr<ThreadGroup> group, ncclComm_t comm, Backend& backend,
                          const NcclTuning& nccl)
      : Communicator(group->tracker(rank)),
        rank_(rank),
        group_(std::move(group)),
        data_(std::make_shared<NcclDataPlane>(comm, backend, group_->tracker(rank), nccl)) {
    std::weak_ptr<NcclDataPlane> weak = data_;
    group_->add_probe([weak]() -> std::optional<std::string> {
      if (auto d = weak.lock()) return d->probe();
      return std::nullopt;
    });
    group_->add_abort_hook([weak] {
      if (auto d = weak.lock()) d->abort();
    });
  }

  std::string name() const override { return "nccl-threads"; }
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  void all_reduce_sum(Tensor& x) override { data_->all_reduce_sum(x); }
  void wait_all_reduces() override { data_->wait_all_reduces(); }
  void broadcast(Tensor& x, int root) override {
    DLB_CHECK(root >= 0 && root < size(), "broadcast from rank {} of {}", root, size());
    data_->broadcast(x, root);
  }
  void watch_compute_stream() override { data_->watch_compute_stream(); }
  void* allocate_window(size_t bytes) override { return data_->allocate_window(bytes); }
  void barrier() override { group_->barrier(rank_); }
  double sum(double value) override { return group_->sum(rank_, value); }
  double max(double value) override { return group_->max(rank_, value); }
  std::vector<std::string> all_gather(const std::string& value) override {
    return group_->all_gather(rank_, value);
  }

 private:
  int rank_;
  std::shared_ptr<ThreadGroup> group_;
  std::shared_ptr<NcclDataPlane> data_;
};

}  // namespace

NcclThreadsGroup::NcclThreadsGroup(int gpus, double timeout_seconds, const NcclTuning& nccl) : nccl_(nccl) {
  const int available = cuda_device_count();
  DLB_REQUIRE(gpus >= 1 && gpus <= available, "--gpus {}: this machine has {} CUDA GPU(s)", gpus, available);
  group_ = std::make_shared<ThreadGroup>(gpus, timeout_seconds);
  ncclConfig_t config = nonblocking_nccl_config(nccl);
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  comms_.assign(static_cast<size_t>(gpus), nullptr);
  NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < gpus; ++r) {
    CUDA_CHECK(cudaSetDevice(r));
    NCCL_CHECK(ncclCommInitRankConfig(&comms_[static_cast<size_t>(r)], gpus, id, r, &config));
  }
  const ncclResult_t end = ncclGroupEnd();
  NCCL_CHECK(end);
  for (ncclComm_t comm : comms_) settle(comm, ncclInProgress, "ncclCommInitRankConfig");
}

NcclThreadsGroup::~NcclThreadsGroup() {
  for (ncclComm_t comm : comms_) {
    if (comm != nullptr) ncclCommDestroy(comm);  // never joined
  }
}

std::unique_ptr<Communicator> NcclThreadsGroup::join(int rank, Backend& backend) {
  DLB_CHECK(rank >= 0 && rank < size(), "rank {} of {}", rank, size());
  ncclComm_t comm = nullptr;
  {
    std::lock_guard lock(mutex_);
    comm = std::exchange(comms_[static_cast<size_t>(rank)], nullptr);
  }
  DLB_CHECK(comm != nullptr, "rank {} joined twice", rank);
  DLB_CHECK(backend.device() == (Device{DeviceKind::cuda, rank}),
            "rank {} runs on {}, its NCCL communicator on cuda:{}", rank, device_name(backend.device()),
            rank);
  return std::make_unique<NcclThreadsCommunicator>(rank, group_, comm, backend, nccl_);
}

void NcclThreadsGroup::abort(const std::string& reason) {
  group_->abort(reason);
  {
    std::lock_guard lock(mutex_);
    for (ncclComm_t& comm : comms_) {
      if (comm != nullptr) ncclCommAbort(std::exchange(comm, nullptr));
    }
  }
  group_->run_abort_hooks();
}

}  // namespace dlbench::parallel

#endif
