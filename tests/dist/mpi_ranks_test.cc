// The mpi communicator with real ranks. CMake runs this binary under mpirun (-np 2 and -np 4) with
// --gtest_filter=MpiRanks*; started alone, these tests skip themselves. Every rank runs every test, in
// the same order, so the collectives inside them match.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "dist/communicators.h"
#include "dist/config_check.h"
#include "dist/launch.h"
#include "dist/mpi_runtime.h"
#include "dist_test_util.h"
#include "temp_dir.h"

namespace dlbench::dist {
namespace {

using namespace dist_testing;
using dlbench::testing::user_error_message;

class MpiRanks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
#if DLBENCH_WITH_MPI
    if (!launched_by_mpi()) return;
    LaunchOptions options;
    options.launcher = "mpi";
    options.timeout_seconds = 20;
    backend_ = make_reference_backend();
    comm_ = make_communicator(options, *backend_);
#endif
  }
  static void TearDownTestSuite() {
    comm_.reset();  // collective: every rank is here
    backend_.reset();
  }
  void SetUp() override {
#if !DLBENCH_WITH_MPI
    GTEST_SKIP() << "this build has no MPI (DLBENCH_WITH_MPI=OFF)";
#endif
    if (!launched_by_mpi())
      GTEST_SKIP() << "not started by mpirun: ctest runs these as dist_mpi_2ranks/4ranks";
  }
  static std::unique_ptr<Backend> backend_;
  static std::unique_ptr<Communicator> comm_;
};
std::unique_ptr<Backend> MpiRanks::backend_;
std::unique_ptr<Communicator> MpiRanks::comm_;

TEST_F(MpiRanks, Identity) {
  EXPECT_EQ(comm_->name(), "mpi");
  EXPECT_GE(comm_->size(), 2);
  const auto ranks = comm_->all_gather(std::to_string(comm_->rank()));
  for (int r = 0; r < comm_->size(); ++r) EXPECT_EQ(ranks[static_cast<size_t>(r)], std::to_string(r));
}

TEST_F(MpiRanks, AllReduceIsExactAtEverySize) {
  // One element, odd sizes, and several MB (3 Mi + 1 floats = 12 MB) with two tensors in flight.
  for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{1001}, int64_t{65537}, (int64_t{3} << 20) + 1}) {
    comm_->set_step(count);
    expect_exact_all_reduce(*comm_, *backend_, DType::f32, count);
  }
}

TEST_F(MpiRanks, HalfPrecisionIsRefusedOnTheCpu) {
  std::vector<double> v{1, 2, 3};
  Buffer x(*backend_, DType::f16, v);
  Tensor t = x.tensor();
  EXPECT_EQ(user_error_message([&] { comm_->all_reduce_sum(t); }),
            "the mpi communicator sums f32 tensors only (CPU ranks train in fp32), not f16");
}

TEST_F(MpiRanks, BroadcastFromEveryRoot) {
  for (int root = 0; root < comm_->size(); ++root) {
    expect_broadcast(*comm_, *backend_, DType::f32, root, 1001);
  }
  expect_broadcast(*comm_, *backend_, DType::f16, comm_->size() - 1, 7);  // bytes: any dtype
}

TEST_F(MpiRanks, ControlPlane) { expect_control_plane(*comm_); }

TEST_F(MpiRanks, ConfigMismatchNamesTheFlag) {
  nlohmann::json config = {{"model", "resnet50"}, {"batch_size", 32}, {"lr", 0.1}, {"device", "cpu"}};
  check_same_config(*comm_, config);  // the same everywhere: passes
  nlohmann::json mine = config;
  if (comm_->rank() == 1) mine["lr"] = 0.2;
  mine["device"] = "cuda:" + std::to_string(comm_->rank());  // rank-specific, left out below
  EXPECT_EQ(user_error_message([&] { check_same_config(*comm_, mine, {"device"}); }),
            "the ranks were started with different settings: --lr (lr): rank 0 has 0.1, rank 1 has 0.2; "
            "start every "
            "rank with the same flags");
}

}  // namespace
}  // namespace dlbench::dist
