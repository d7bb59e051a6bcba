// `dlbench sweep`: a grid of benchmark points (model x precision x GPU count x batch size), each run as its
// own `dlbench bench` process (under mpirun for --launcher mpi), its result appended to a JSON Lines file.
//
// Resumable: a point already in the results file (same model, precision, GPUs, batch size, launcher) is
// skipped, so an interrupted sweep started again runs only the missing points (--retry-failed also runs
// the points recorded as failed). A point that fails (non-zero exit, a crash, a time-out) is recorded with
// its error — the last line its process wrote to stderr — and the sweep goes on. Each point's output goes
// to RESULTS.logs/<point>.log. A progress line says which point of how many runs and the time left.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dlbench {

struct SweepOptions {
  std::vector<std::string> models = {"resnet50"};
  std::vector<std::string> precisions = {"fp32"};
  std::vector<int> gpus = {1};
  std::vector<int64_t> batch_sizes = {256};
  std::string launcher = "threads";  // threads (--gpus N in one process) | mpi (mpirun -np N)
  std::string device = "auto";
  int64_t steps = 60, warmup_steps = 20;
  std::string results;  // the JSON Lines file (appended to)
  bool retry_failed = false;
  double point_timeout_seconds = 1800;
  std::string mpirun = "mpirun";         // the launcher command for --launcher mpi
  std::vector<std::string> mpirun_args;  // extra arguments for it (e.g. --allow-run-as-root)
};

// The identity of a point in a results file.
nlohmann::json sweep_point_key(const std::string& model, const std::string& precision, int gpus,
                               int64_t batch_size, const std::string& launcher);

// The points of `path` by key: status "ok" or "failed". Malformed lines are named (file and line) on
// stderr and skipped. A missing file has none.
std::vector<std::pair<nlohmann::json, std::string>> read_sweep_points(const std::string& path);

void run_sweep(const SweepOptions& options);

}  // namespace dlbench
