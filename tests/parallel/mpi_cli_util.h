// Running the dlbench binary under mpirun from tests, with a time limit (nothing here can hang CI).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "parallel/mpi_runtime.h"
#include "temp_dir.h"

namespace dlbench::testing {

// Runs `mpirun -np RANKS [env] dlbench ARGS` with a time limit.
inline CommandResult run_mpi(int ranks, const std::string& env, const std::string& args,
                             int timeout_seconds = 60) {
  dlbench::testing::TempDir dir;
  const std::string out = dir.file("out"), err = dir.file("err");
  const std::string cmd = "timeout " + std::to_string(timeout_seconds) +
                          " mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " " +
                          env + " " + DLBENCH_BINARY + " " + args + " </dev/null >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// Tests that start mpirun themselves: skipped inside a process mpirun started, and without MPI.
class MpirunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (parallel::launched_by_mpi()) GTEST_SKIP() << "starts mpirun itself";
#if !DLBENCH_WITH_MPI
    GTEST_SKIP() << "this build has no MPI (DLBENCH_WITH_MPI=OFF)";
#endif
  }
};

// Two hosts on this machine, nodea and nodeb with two slots each (tests/parallel/simulated_hosts): each
// test's own state folder (host file, daemons' pids, each host's view of data/).
class SimulatedHosts {
 public:
  // The reason this machine cannot give a process its own host name, or "" when it can.
  static std::string unavailable() {
    const CommandResult probe = run_shell(script("agent.sh") + " --probe", 10);
    return probe.exit_code == 0 ? std::string() : probe.err;
  }
  static std::string script(const std::string& name) {
    return std::string(DLBENCH_SOURCE_DIR) + "/tests/parallel/simulated_hosts/" + name;
  }
  std::string state() const { return dir_.path().string(); }
  // A data folder that each host sees as its own: `state()/data`, and nodeb's own copy where the test
  // makes `state()/nodeb.data`.
  std::string data() const { return dir_.file("data"); }

  // `mpirun.sh MPIRUN_ARGS dlbench ARGS` with a time limit; MPIRUN_ARGS holds -np (and the second program's
  // ": -np 2 -H nodeb:2 dlbench ..." of a run whose hosts differ).
  CommandResult run(const std::string& mpirun_args, const std::string& args, int timeout_seconds) const {
    return run_shell("env DLBENCH_SIMULATED_HOSTS_DIR=" + state() + " " + script("mpirun.sh") + " " +
                         mpirun_args + " " + DLBENCH_BINARY + " " + args,
                     timeout_seconds);
  }

 private:
  TempDir dir_;
};

// Fails unless `hosts` (a result's system.hosts) holds nodea with ranks 0, 1 and nodeb with ranks 2, 3,
// each host's local ranks 0, 1: the launch really used two hosts, and each rank knows its place on its own.
inline void expect_two_simulated_hosts(const nlohmann::json& hosts) {
  const nlohmann::json expected = nlohmann::json::parse(R"([
    {"name": "nodea", "ranks": [0, 1], "local_ranks": [0, 1], "gpus": [], "gpu_names": []},
    {"name": "nodeb", "ranks": [2, 3], "local_ranks": [0, 1], "gpus": [], "gpu_names": []}])");
  EXPECT_EQ(hosts, expected) << "the ranks did not run on the two hosts (a launch fallen back to one?)";
}

inline int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace dlbench::testing
