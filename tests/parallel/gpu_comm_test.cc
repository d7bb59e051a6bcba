// The NCCL communicators: nccl-threads (one thread per GPU of this machine) and mpi-nccl (under mpirun, one
// GPU per process). Without a GPU they skip themselves, saying so.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "backend/backend_factory.h"
#include "parallel/launch.h"
#include "parallel/mpi_runtime.h"
#include "parallel_test_util.h"

#if DLBENCH_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#include "parallel/nccl_threads.h"
#endif

namespace dlbench::parallel {
namespace {

using namespace parallel_testing;

int gpus_here() {
#if DLBENCH_WITH_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

void exercise(Communicator& comm, Backend& backend) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{1001}, (int64_t{3} << 20) + 1}) {
      expect_exact_all_reduce(comm, backend, dtype, count);
    }
  }
  for (int root = 0; root < comm.size(); ++root) expect_broadcast(comm, backend, DType::f32, root, 4099);
  expect_control_plane(comm);
}

// With NcclTuning::symmetric: the same sums on tensors in the communicator's window (NCCL's symmetric
// kernels), at two offsets into it; without, allocate_window gives nothing.
void exercise_window(Communicator& comm, Backend& backend, bool symmetric) {
  const int64_t count = (int64_t{3} << 20) + 1;
  const size_t bytes = 2 * (static_cast<size_t>(count) * 4 + 4096) + 8192;
  auto* window = static_cast<std::byte*>(comm.allocate_window(bytes));
  if (!symmetric) {
    EXPECT_EQ(window, nullptr);
    return;
  }
  ASSERT_NE(window, nullptr);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : {int64_t{1}, int64_t{1001}, count}) {
      expect_exact_all_reduce(comm, backend, dtype, n, window);
      expect_exact_all_reduce(comm, backend, dtype, n, window + 4096);
    }
  }
}

// Every tuning of the collectives (NCCL's own, symmetric windows) sums exactly.
class NcclThreads : public ::testing::TestWithParam<NcclTuning> {};

INSTANTIATE_TEST_SUITE_P(Tunings, NcclThreads,
                         ::testing::Values(NcclTuning{}, NcclTuning{/*symmetric=*/true}),
                         [](const auto& info) { return info.param.symmetric ? "Symmetric" : "Default"; });

TEST_P(NcclThreads, AllReduceBroadcastAndControlPlaneOnEveryGpu) {
  const int gpus = gpus_here();
  if (gpus == 0) GTEST_SKIP() << "no CUDA GPU (or no CUDA in this build): nccl-threads needs one";
  if (launched_by_mpi()) GTEST_SKIP() << "under mpirun: the threads launcher runs alone";
#if DLBENCH_WITH_CUDA
  const int n = std::min(gpus, 4);
  NcclThreadsGroup group(n, 60.0, GetParam());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto backend = make_backend("cuda", Device{DeviceKind::cuda, r}, 0);
      auto comm = group.join(r, *backend);
      EXPECT_EQ(comm->name(), "nccl-threads");
      EXPECT_EQ(comm->rank(), r);
      EXPECT_EQ(comm->size(), n);
      exercise(*comm, *backend);
      exercise_window(*comm, *backend, GetParam().symmetric);
    });
  }
  for (auto& t : threads) t.join();
#endif
}

TEST(MpiRanksNccl, AllReduceBroadcastAndControlPlane) {
  if (!launched_by_mpi())
    GTEST_SKIP() << "not started by mpirun: ctest runs these as parallel_mpi_2ranks/4ranks";
  // Every rank sees the same machine in these tests (one node), so all skip together.
  if (gpus_here() == 0) GTEST_SKIP() << "no CUDA GPU (or no CUDA in this build): mpi-nccl needs one per rank";
  const char* per_node = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (per_node != nullptr && std::atoi(per_node) > gpus_here()) {
    GTEST_SKIP() << per_node << " ranks on this node but " << gpus_here()
                 << " GPU(s): mpi-nccl needs one per rank";
  }
  LaunchOptions options;
  options.launcher = Launcher::mpi;
  options.device = DeviceKind::cuda;
  options.timeout_seconds = 60;
  auto launch = make_launch(options);
  auto backend = make_backend("cuda", Device{DeviceKind::cuda, launch->gpu(0)}, 0);
  auto comm = launch->join(0, *backend);
  EXPECT_EQ(comm->name(), "mpi-nccl");
  exercise(*comm, *backend);
}

}  // namespace
}  // namespace dlbench::parallel
