// The two run loops behind the CLI: `dlbench train` (epochs over real or synthetic data, evaluation,
// checkpoints) and `dlbench bench` (the measuring protocol on synthetic data). Each prints a header
// echoing the resolved configuration, a progress line every --log-every steps and a final summary, and
// returns the result object that --json writes.
#pragma once

#include <nlohmann/json.hpp>

#include "train/config.h"

namespace dlbench {

nlohmann::json run_train(const RunConfig& config);
nlohmann::json run_bench(const RunConfig& config);

}  // namespace dlbench
