// The two run loops behind the CLI: `dlbench train` (epochs over real or synthetic data, evaluation,
// checkpoints) and `dlbench bench` (the measuring protocol on synthetic data). Each prints a header
// echoing the resolved configuration, a progress line every --log-every steps and a final summary, and
// returns the result object that --json writes.
#pragma once

#include <optional>

#include "bench/result.h"
#include "train/config.h"

namespace dlbench {

// Rank 0's result; nothing in an MPI process of another rank.
std::optional<RunResult> run_train(const RunConfig& config);
std::optional<RunResult> run_bench(const RunConfig& config);

}  // namespace dlbench
