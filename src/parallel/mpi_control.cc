#include "parallel/mpi_control.h"

#if DLBENCH_WITH_MPI

#include <algorithm>
#include <numeric>

#include "parallel/mpi_runtime.h"

namespace dlbench::parallel {

MpiControlPlane::MpiControlPlane(MPI_Comm world, std::shared_ptr<ProgressTracker> progress)
    : progress_(std::move(progress)) {
  MPI_CHECK(MPI_Comm_dup(world, &comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiControlPlane::~MpiControlPlane() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiControlPlane::barrier() {
  const int64_t sequence = progress_->begin(OpKind::barrier);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(comm_, &request));
  wait_polling(&request, 1);
  progress_->finish(sequence);
}

double MpiControlPlane::reduce(double value, MPI_Op op, OpKind kind) {
  const int64_t sequence = progress_->begin(kind);
  double result = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&value, &result, 1, MPI_DOUBLE, op, comm_, &request));
  wait_polling(&request, 1);
  progress_->finish(sequence);
  return result;
}

double MpiControlPlane::sum(double value) { return reduce(value, MPI_SUM, OpKind::sum); }
double MpiControlPlane::max(double value) { return reduce(value, MPI_MAX, OpKind::max); }

std::vector<std::string> MpiControlPlane::all_gather(const std::string& value) {
  const int64_t sequence = progress_->begin(OpKind::all_gather);
  DLB_CHECK(value.size() < kMpiMaxCount, "all_gather of {} bytes", value.size());
  const int length = static_cast<int>(value.size());
  std::vector<int> lengths(static_cast<size_t>(size_));
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, &request));
  wait_polling(&request, 1);
  std::vector<int> offsets(static_cast<size_t>(size_), 0);
  for (size_t r = 1; r < offsets.size(); ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(static_cast<size_t>(offsets.back() + lengths.back()), '\0');
  MPI_CHECK(MPI_Iallgatherv(value.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                            MPI_CHAR, comm_, &request));
  wait_polling(&request, 1);
  std::vector<std::string> result;
  for (size_t r = 0; r < lengths.size(); ++r)
    result.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(lengths[r])));
  progress_->finish(sequence);
  return result;
}

void MpiControlPlane::broadcast_bytes(void* data, size_t bytes, int root) {
  const int64_t sequence = progress_->begin(OpKind::broadcast);
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += kMpiMaxCount) {
    const int count = static_cast<int>(std::min(kMpiMaxCount, bytes - done));
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Ibcast(p + done, count, MPI_BYTE, root, comm_, &request));
    wait_polling(&request, 1);
  }
  progress_->finish(sequence);
}

}  // namespace dlbench::parallel

#endif
