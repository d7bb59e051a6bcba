// `dlbench sweep`: a grid of benchmark points (model x precision x GPU count x batch size), each run as its
// own `dlbench bench` process (under mpirun for --launcher mpi), its result appended to a JSON Lines file.
// `dlbench compare`: the same grid run by the peers of peers/ (PyTorch eager and compiled, single-GPU and
// DistributedDataParallel under torchrun or mpirun; JAX on one GPU), into the same kind of file. A peer
// that is not installed (its script exits with status 3, or the interpreter is missing) has its points
// recorded as "unavailable" with the reason, so that the report names it rather than dropping it; so are,
// without starting anything, the points a peer cannot run (JAX's on several GPUs or of a GPT model, the
// PyTorch GPT peer's on several GPUs or at batch max).
// `dlbench study`: the system table, the sweep (threads, and mpirun where there are several GPUs), the
// comparison and the report, from one command.
//
// Resumable: a point already in the results file (same model, precision, GPUs, batch size, launcher) is
// skipped, so an interrupted sweep started again runs only the missing points (--retry-failed also runs
// the points recorded as failed). A point that fails (non-zero exit, a crash, a time-out) is recorded with
// its error — the last line its process wrote to stderr — and the sweep goes on. Each point's output goes
// to RESULTS.logs/<point>.log. A progress line says which point of how many runs and the time left.
// A dlbench point refused at its command line (a bad --bench-args flag) stops the sweep with that line,
// recording nothing: every point would fail the same way. A results line that cannot be appended whole (a
// full disk) stops it too; the file keeps every earlier line, and the same command started again resumes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dlbench {

struct SweepOptions {
  // Who trains: dlbench, or a peer: pytorch | pytorch-compiled | jax.
  std::string framework = "dlbench";
  // Empty (or unset) = the defaults of the device the points run on: on a GPU
  // resnet50, batch 256, 60 timed steps after 20; on the CPU, where such a point takes hours, resnet20 and
  // what `dlbench bench` picks there (batch 128, 20 steps after 2; an ImageNet model 16, 10 after 2).
  std::vector<std::string> models;
  std::vector<std::string> precisions = {"fp32"};
  std::vector<int> gpus = {1};
  std::vector<std::string> batch_sizes;  // numbers, or "max": the largest that fits
  // dlbench: threads (--gpus N in one process) | mpi (mpirun -np N); peers: torchrun | mpi.
  std::string launcher = "threads";
  std::string device = "auto";
  std::optional<int64_t> steps, warmup_steps;
  std::string results;  // the JSON Lines file (appended to)
  bool retry_failed = false;
  double point_timeout_seconds = 1800;
  std::string mpirun = "mpirun";         // the launcher command for --launcher mpi
  std::vector<std::string> mpirun_args;  // extra arguments for it (e.g. --allow-run-as-root)
  std::string python = "python3";        // the peers' interpreter
  std::string peers_dir;                 // default: the peers/ folder beside the binary or the sources
  // dlbench: --algorithm-cache for every GPU point: "auto" (RESULTS.algorithms.json), "none", or a FILE.
  // One file for the whole grid: the first point searches, every later one (other GPU counts, launchers,
  // later sweeps) runs the same kernels, so a speedup compares like with like.
  std::string algorithm_cache = "auto";
  // dlbench: extra `dlbench bench` flags for every point (e.g. {"--bucket-mb", "0"}). Part of a point's
  // identity when given, so a sweep with other flags into the same file runs its points again.
  std::vector<std::string> bench_args;
  // dlbench: --decode for every point (auto | cpu | gpu; it matters with --bench-args --data,DIR). Part of
  // a point's identity when not auto, so that points decoded elsewhere are not taken for these.
  std::string decode = "auto";
};

// The file every dlbench point of `o` is given as --algorithm-cache ("" for none): RESULTS.algorithms.json
// for "auto" when the points run on a GPU (`on_gpu`), nothing on the CPU (it has no choices to keep).
std::string sweep_algorithm_cache(const SweepOptions& o, bool on_gpu);

// The peers a comparison runs by default.
const std::vector<std::string>& peer_frameworks();

// The identity of a point in a results file.
// "batch_size" is a number, or the string "max". Lines written before points named their framework are
// dlbench's.
nlohmann::json sweep_point_key(const std::string& framework, const std::string& model,
                               const std::string& precision, int gpus, const std::string& batch_size,
                               const std::string& launcher);

// The points of `path` by key: status "ok", "failed" or "unavailable". Malformed lines are named (file and
// line) on stderr and skipped. A missing file has none.
std::vector<std::pair<nlohmann::json, std::string>> read_sweep_points(const std::string& path);

// Runs the grid of `options.framework`; UserError at the end when a point failed.
void run_sweep(const SweepOptions& options);

// Runs the grid for each of `frameworks` (peers), then says which were not installed; UserError at the
// end when a point of an installed peer failed.
void run_compare(const SweepOptions& options, const std::vector<std::string>& frameworks);

struct StudyOptions {
  SweepOptions grid;                    // results, models, precisions, GPU counts, batch sizes, steps
  std::vector<std::string> frameworks;  // peers; default peer_frameworks()
  std::string report_dir = "study";
};

// The whole study: dlbench's points (threads; also mpirun when more than one GPU count is asked for and
// mpirun is found), the peers', then the report of the results file. Failed points are recorded and the
// study goes on; the report says which.
void run_study(const StudyOptions& options);

}  // namespace dlbench
