// Running the dlbench binary under mpirun from tests, with a time limit (nothing here can hang CI).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

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

inline int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace dlbench::testing
