// Choosing a communicator: the local one, and one clear line for every launcher this start cannot give.
#include "parallel/launch.h"

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "parallel/mpi_runtime.h"
#include "parallel_test_util.h"
#include "temp_dir.h"

namespace dlbench::parallel {
namespace {

using namespace parallel_testing;
using dlbench::testing::user_error_message;

class Launching : public ::testing::Test {
 protected:
  void SetUp() override {
    if (launched_by_mpi()) GTEST_SKIP() << "these check starts without mpirun";
  }
};

TEST_F(Launching, OneRankIsLocal) {
  auto backend = make_reference_backend();
  for (Launcher launcher : {Launcher::automatic, Launcher::threads}) {
    LaunchOptions options;
    options.launcher = launcher;
    auto launch = make_launch(options);
    EXPECT_EQ(launch->launcher(), "single");
    EXPECT_EQ(launch->local_ranks(), 1);
    auto comm = launch->join(0, *backend);
    EXPECT_EQ(comm->name(), "local");
    EXPECT_EQ(comm->rank(), 0);
    EXPECT_EQ(comm->size(), 1);
  }
}

TEST_F(Launching, LocalLeavesTensorsAsTheyAreAndEchoesTheControlPlane) {
  auto backend = make_reference_backend();
  auto comm = make_communicator(LaunchOptions{}, *backend);
  for (int64_t count : {1, 3, 1001}) expect_exact_all_reduce(*comm, *backend, DType::f32, count);
  expect_broadcast(*comm, *backend, DType::f32, 0, 5);
  expect_control_plane(*comm);
  comm->set_step(12);
  EXPECT_EQ(comm->step(), 12);
  int ran = 0;
  auto launch = make_launch(LaunchOptions{});
  run_local_ranks(*launch, [&](int slot) { ran += 1 + slot; });
  EXPECT_EQ(ran, 1);
}

// --launcher's text is parsed once, at the command line, and named back in results and headers.
TEST(LauncherFlag, ParsesEveryChoiceAndNamesItBack) {
  for (const char* text : {"auto", "threads", "mpi"}) EXPECT_STREQ(launcher_name(parse_launcher(text)), text);
}

TEST_F(Launching, UnavailableLaunchersAreOneClearLine) {
  EXPECT_EQ(user_error_message([&] { parse_launcher("slurm"); }),
            "--launcher slurm: unknown; choose auto, threads or mpi");
  LaunchOptions o;
  o.launcher = Launcher::mpi;
#if DLBENCH_WITH_MPI
  EXPECT_EQ(user_error_message([&] { make_launch(o); }),
            "--launcher mpi: this process was not started by mpirun; run mpirun -np N dlbench ...");
#else
  EXPECT_EQ(user_error_message([&] { make_launch(o); }),
            "--launcher mpi: this build has no MPI; rebuild with OpenMPI installed (-DDLBENCH_WITH_MPI=ON)");
#endif
  o = LaunchOptions{};
  o.gpus = 4;
  EXPECT_EQ(user_error_message([&] { make_launch(o); }),
            "--gpus 4 needs --device cuda; CPU ranks run one per process: mpirun -np 4 dlbench ...");
  o = LaunchOptions{};
  o.timeout_seconds = 0;
  EXPECT_EQ(user_error_message([&] { make_launch(o); }), "--timeout 0: must be a positive number of seconds");
}

TEST_F(Launching, ThreadsOnMoreGpusThanTheMachineHas) {
#if DLBENCH_WITH_CUDA
  LaunchOptions o;
  o.device = DeviceKind::cuda;
  o.gpus = 64;
  const std::string message = user_error_message([&] { make_launch(o); });
  EXPECT_EQ(message.rfind("--gpus 64: this machine has ", 0), 0u) << message;
#else
  GTEST_SKIP() << "no CUDA in this build";
#endif
}

}  // namespace
}  // namespace dlbench::parallel
