// Where the ranks are, from inside them: CMake runs this binary on the two simulated hosts
// (tests/parallel/simulated_hosts/mpirun.sh -np 4, as parallel_hosts_mpi) with --gtest_filter=MpiHosts*;
// started otherwise, these tests skip themselves. Ranks 0, 1 are on nodea and 2, 3 on nodeb, so a rank's
// place on its host (which picks its GPU) differs from its global rank on the second host.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "mpi_cli_util.h"
#include "parallel/launch.h"
#include "parallel/mpi_runtime.h"
#include "parallel/placement.h"
#include "parallel_test_util.h"
#include "temp_dir.h"

namespace dlbench::parallel {
namespace {

class MpiHosts : public ::testing::Test {
 protected:
  void SetUp() override {
#if !DLBENCH_WITH_MPI
    GTEST_SKIP() << "this build has no MPI (DLBENCH_WITH_MPI=OFF)";
#else
    if (!launched_by_mpi() || std::getenv("DLBENCH_SIMULATED_HOSTS_DIR") == nullptr)
      GTEST_SKIP() << "not started on the simulated hosts: ctest runs these as parallel_hosts_mpi";
    ensure_mpi_initialized();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ASSERT_EQ(size, 4) << "run with -np 4 over nodea and nodeb";
#endif
  }
  int rank_ = 0;
};

#if DLBENCH_WITH_MPI
TEST_F(MpiHosts, LocalRankIsThePlaceOnTheHostNotTheGlobalRank) {
  EXPECT_EQ(this_host(), rank_ < 2 ? "nodea" : "nodeb") << "rank " << rank_;
  EXPECT_EQ(launcher_local_rank(), rank_ % 2);
  EXPECT_EQ(node_local_rank(), rank_ % 2);
  // MPI's own grouping by node agrees with the launcher's variable; without the variable (another
  // launcher), it is what decides.
  EXPECT_EQ(shared_memory_local_rank(), rank_ % 2);
  const std::string saved = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(launcher_local_rank(), std::nullopt);
  EXPECT_EQ(node_local_rank(), rank_ % 2);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", saved.c_str(), 1);
  // GPU ranks: ranks 2 and 3 take nodeb's GPUs 0 and 1; a host with fewer GPUs than ranks is named.
  EXPECT_EQ(gpu_of_local_rank(node_local_rank(), 2, this_host()), rank_ % 2);
  if (rank_ % 2 == 1) {
    EXPECT_EQ(
        dlbench::testing::user_error_message([&] { gpu_of_local_rank(node_local_rank(), 1, this_host()); }),
        "--device cuda under mpirun: this process is number 1 on host " + this_host() + " but " +
            this_host() +
            " has 1 CUDA GPU(s); start at most one process per GPU of each host (a hostfile "
            "line `" +
            this_host() + " slots=1`)");
  }
}

TEST_F(MpiHosts, SystemHostsListsEveryNodeAndSumsAreExact) {
  LaunchOptions options;
  options.launcher = Launcher::mpi;
  options.timeout_seconds = 20;
  auto backend = make_reference_backend();
  auto launch = make_launch(options);
  auto comm = launch->join(0, *backend);
  const auto places = gather_places(*comm, place_of(*launch, 0, *backend));
  dlbench::testing::expect_two_simulated_hosts(hosts_json(places));
  EXPECT_EQ(hosts_summary(places), "2 hosts: nodea (ranks 0, 1), nodeb (ranks 2, 3)");
  EXPECT_EQ(host_of(places, 3), "nodeb");
  // Every byte over TCP between the hosts: the sums are exact.
  for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{1} << 20})
    parallel_testing::expect_exact_all_reduce(*comm, *backend, DType::f32, count);
  parallel_testing::expect_control_plane(*comm);
  comm.reset();  // collective: every rank is here
}
#endif

}  // namespace
}  // namespace dlbench::parallel
