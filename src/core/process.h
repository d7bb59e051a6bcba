// Running another program: the sweep's points, gnuplot, a browser in the tests. Each runs in its own
// process group, so that a time-out stops everything it started (mpirun's ranks, a browser's helpers).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dlbench {

struct ProcessOptions {
  std::string cwd;                // "" = this process's folder
  double timeout_seconds = 3600;  // then the whole process group is killed
  // Where stdout and stderr both go (created or truncated); "" = captured into ProcessResult::out/err.
  std::string log_path;
};

struct ProcessResult {
  int exit_code = -1;  // -1: killed by a signal or the time-out; 127: the program could not be started
  bool timed_out = false;
  bool stopped = false;  // killed because this process was asked to stop (core/signals.h)
  double seconds = 0;
  std::string out, err;  // when not sent to a log file
};

// Runs `argv` (argv[0] found on $PATH unless it names a path) with stdin from /dev/null.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options);

// A stop asked by SIGINT/SIGTERM (core/signals.h, after defer_stop_to_safe_points) makes every
// run_process kill its program's group and return, so a command stopped by `timeout` or Ctrl-C can record
// what it was doing before it exits.

// The path of `program` as the shell would find it on $PATH; nullopt when it is not there.
std::optional<std::string> find_program(const std::string& program);

}  // namespace dlbench
