// The control plane of ranks that are MPI processes (mpi and mpi-nccl): small host values over a
// communicator of its own, each call blocking until done and counted in the rank's ProgressTracker.
#pragma once

#if DLBENCH_WITH_MPI

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "parallel/progress.h"

namespace dlbench::parallel {

class MpiControlPlane {
 public:
  // Duplicates `world` (collective).
  MpiControlPlane(MPI_Comm world, std::shared_ptr<ProgressTracker> progress);
  ~MpiControlPlane();
  MpiControlPlane(const MpiControlPlane&) = delete;
  MpiControlPlane& operator=(const MpiControlPlane&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  void barrier();
  double sum(double value);
  double max(double value);
  std::vector<std::string> all_gather(const std::string& value);
  // Root's `bytes` bytes at `data` (host memory) to every rank.
  void broadcast_bytes(void* data, size_t bytes, int root);

 private:
  double reduce(double value, MPI_Op op, OpKind kind);
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<ProgressTracker> progress_;
};

// MPI counts are int: larger buffers go in pieces of this many elements.
constexpr size_t kMpiMaxCount = size_t{1} << 30;

}  // namespace dlbench::parallel

#endif
