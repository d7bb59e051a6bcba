#include "parallel/nccl_data_plane.h"

#include "core/timeline.h"

#if DLBENCH_WITH_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_stream.h"
#include "parallel/communicator.h"
#include "parallel/nccl_check.h"

namespace dlbench::parallel {

namespace {

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    default:
      break;
  }
  DLB_CHECK(false, "NCCL: no reduction for {}", dtype_name(dtype));
  return ncclFloat32;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

ncclConfig_t nonblocking_nccl_config(const NcclTuning& nccl) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

void settle(ncclComm_t comm, ncclResult_t result, const char* what) {
  while (result == ncclInProgress) {
    std::this_thread::yield();
    if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) break;
  }
  if (result != ncclSuccess) throw_nccl_failure(__FILE__, __LINE__, what, result);
}

NcclDataPlane::NcclDataPlane(ncclComm_t comm, Backend& backend, std::shared_ptr<ProgressTracker> progress,
                             const NcclTuning& nccl)
    : comm_(comm),
      backend_(backend),
      device_(backend.device().index),
      compute_(static_cast<cudaStream_t>(backend.native_stream())),
      progress_(std::move(progress)),
      symmetric_(nccl.symmetric) {
  DLB_CHECK(backend.device().kind == DeviceKind::cuda && compute_ != nullptr,
            "an NCCL communicator needs a GPU backend, not '{}'", backend.name());
  activate();
  comm_stream_ = cuda::new_stream(/*greatest_priority=*/false);
  CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&track_comm_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&track_compute_, cudaEventDisableTiming));
}

NcclDataPlane::~NcclDataPlane() {
  // Never throws: best effort, in order (finish the work, release NCCL, then the stream and events).
  cudaSetDevice(device_);
  bool aborted = false;
  {
    std::lock_guard lock(track_mutex_);
    aborted = aborted_;
  }
  if (!aborted) {
    cudaStreamSynchronize(comm_stream_);
    ncclResult_t result = ncclCommFinalize(comm_);
    while (result == ncclInProgress) {
      std::this_thread::yield();
      if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) break;
    }
    ncclCommDestroy(comm_);
  }
  for (cudaEvent_t e : {fork_, joined_, track_comm_, track_compute_}) {
    if (e) cudaEventDestroy(e);
  }
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
  // Destroying (or aborting) the communicator released its windows; the memory goes last.
  for (void* p : windows_) ncclMemFree(p);
}

void* NcclDataPlane::allocate_window(size_t bytes) {
  if (!symmetric_) return nullptr;
  activate();
  void* memory = nullptr;
  NCCL_CHECK(ncclMemAlloc(&memory, std::max<size_t>(bytes, NCCL_WIN_REQUIRED_ALIGNMENT)));
  windows_.push_back(memory);
  ncclWindow_t window = nullptr;
  ncclResult_t result = ncclCommWindowRegister(comm_, memory, bytes, &window, NCCL_WIN_COLL_SYMMETRIC);
  // On a non-blocking communicator the registration may go on after the call returned ncclSuccess; the
  // communicator takes no other call until its state says it is done.
  if (result == ncclSuccess) result = ncclInProgress;
  settle(comm_, result, "ncclCommWindowRegister");
  return memory;
}

void NcclDataPlane::activate() const { CUDA_CHECK(cudaSetDevice(device_)); }

void NcclDataPlane::all_reduce_sum(Tensor& x) {
  check_reducible("nccl all_reduce_sum", x);
  DLB_CHECK(x.device() == backend_.device(), "nccl all_reduce_sum: {} is not on {}", x.describe(),
            device_name(backend_.device()));
  activate();
  const bool captured = capturing(compute_);
  const int64_t sequence = captured ? 0 : progress_->begin(OpKind::all_reduce);
  CUDA_CHECK(cudaEventRecord(fork_, compute_));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, fork_, 0));
  TimelineSpan span(fmt::format("all-reduce {:.2f} MB", static_cast<double>(x.bytes()) / 1e6),
                    "communication", comm_stream_);
  settle(comm_,
         ncclAllReduce(x.data(), x.data(), static_cast<size_t>(x.numel()), nccl_dtype(x.dtype()), ncclSum,
                       comm_, comm_stream_),
         "ncclAllReduce");
  CUDA_CHECK(cudaEventRecord(joined_, comm_stream_));
  if (!captured) {
    std::lock_guard lock(track_mutex_);
    CUDA_CHECK(cudaEventRecord(track_comm_, comm_stream_));
    comm_sequence_ = sequence;
  }
}

void NcclDataPlane::wait_all_reduces() {
  activate();
  // `joined` was last recorded after the last reduction; if none was ever enqueued, the wait is a no-op.
  CUDA_CHECK(cudaStreamWaitEvent(compute_, joined_, 0));
}

void NcclDataPlane::broadcast(Tensor& x, int root) {
  DLB_CHECK(x.device() == backend_.device(), "nccl broadcast: {} is not on {}", x.describe(),
            device_name(backend_.device()));
  activate();
  const int64_t sequence = progress_->begin(OpKind::broadcast);
  CUDA_CHECK(cudaEventRecord(fork_, compute_));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, fork_, 0));
  settle(comm_, ncclBroadcast(x.data(), x.data(), x.bytes(), ncclUint8, root, comm_, comm_stream_),
         "ncclBroadcast");
  CUDA_CHECK(cudaEventRecord(joined_, comm_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(compute_, joined_, 0));
  // Polled rather than cudaStreamSynchronize, so that an NCCL error surfaces here instead of a hang.
  while (true) {
    const cudaError_t status = cudaStreamQuery(comm_stream_);
    if (status == cudaSuccess) break;
    if (status != cudaErrorNotReady) CUDA_CHECK(status);
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress)
      throw_nccl_failure(__FILE__, __LINE__, "ncclBroadcast", async);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  progress_->finish(sequence);
}

void NcclDataPlane::watch_compute_stream() {
  activate();
  if (capturing(compute_)) return;
  const int64_t sequence = progress_->begin(OpKind::compute_stream);
  std::lock_guard lock(track_mutex_);
  CUDA_CHECK(cudaEventRecord(track_compute_, compute_));
  compute_sequence_ = sequence;
}

std::optional<std::string> NcclDataPlane::probe() {
  // The watchdog's thread must not invalidate a graph capture the rank's thread may be making (global
  // mode forbids event queries elsewhere): relaxed mode for this thread.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  std::lock_guard lock(track_mutex_);
  if (aborted_) return std::nullopt;
  if (cudaSetDevice(device_) != cudaSuccess) return fmt::format("cannot select GPU {}", device_);
  for (auto [event, sequence] :
       {std::pair{track_comm_, &comm_sequence_}, std::pair{track_compute_, &compute_sequence_}}) {
    if (*sequence == 0) continue;
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) {
      progress_->finish_through(*sequence);
      *sequence = 0;
    } else if (status != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return fmt::format("rank {}: GPU {} failed during a collective: {}", progress_->rank(), device_,
                         cudaGetErrorString(status));
    }
  }
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
      async != ncclInProgress) {
    const char* last = ncclGetLastError(comm_);
    return fmt::format("rank {}: NCCL error {}: {}{}{}", progress_->rank(), static_cast<int>(async),
                       ncclGetErrorString(async), last && *last ? ": " : "", last ? last : "");
  }
  return std::nullopt;
}

void NcclDataPlane::abort() {
  {
    std::lock_guard lock(track_mutex_);
    if (aborted_) return;
    aborted_ = true;
  }
  cudaSetDevice(device_);
  ncclCommAbort(comm_);
}

}  // namespace dlbench::parallel

#endif
