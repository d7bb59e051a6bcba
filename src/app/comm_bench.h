// `dlbench comm-bench`: all-reduce time and bandwidth through a Communicator, over a range of sizes, with
// every result checked.
//
// For each size (min_bytes, x2, ... max_bytes) every rank fills its buffer with small integers that
// depend on the rank and the index, so the sum over ranks is exact in f32, f16 and bf16; one all-reduce is
// compared element by element with the expected sums; then `warmup` untimed and `iters` timed iterations
// run (each: barrier, all_reduce_sum, wait_all_reduces, synchronize). An iteration's time is the slowest
// rank's; a row reports the median. Bandwidths follow nccl-tests: algbw = bytes / time,
// busbw = algbw * 2 (n - 1) / n (the bytes each rank's link carries in a ring all-reduce).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"
#include "parallel/launcher.h"

namespace dlbench::parallel {

struct CommBenchOptions {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{64} << 20;
  int iters = 20;
  int warmup = 5;
  DType dtype = DType::f32;  // f16 and bf16 on a GPU
  DeviceKind device = DeviceKind::cpu;
  Launcher launcher = Launcher::automatic;
  int gpus = 1;
  double timeout_seconds = 300;
  bool nccl_symmetric = false;  // the buffer from Communicator::allocate_window
  std::string json_path;
};

// Checks the options (UserError naming the flag), runs on every rank of this process, prints the table on
// rank 0 and returns the result object (rank 0's; {} on other ranks). Throws Error if a sum was wrong.
nlohmann::json run_comm_bench(const CommBenchOptions& options);

// Bus bandwidth of an all-reduce among `ranks` given its algorithm bandwidth (nccl-tests' factor).
double all_reduce_bus_bandwidth(double algbw, int ranks);
// The value rank `rank` puts at index `index`: an integer in [-4, 4].
int comm_bench_value(int rank, int64_t index);

}  // namespace dlbench::parallel
