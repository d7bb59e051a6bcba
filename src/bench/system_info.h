// A short description of the machine and the software, embedded in every result file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace dlbench {

// The machine and its software: host, OS, CPU model, sockets, cores, memory; each GPU's name, memory,
// clocks, power limit and the GPU-GPU topology (NVML); driver, CUDA, cuDNN, cuBLAS, NCCL, MPI, oneDNN and
// compiler versions; dlbench's version and commit.
nlohmann::json system_info();
// The environment variables that change what dlbench, NCCL or CUDA run (DLBENCH_*: the log level and test
// hooks; NCCL_*: the collectives' tuning, e.g. NCCL_NVLS_ENABLE;
// CUDA_VISIBLE_DEVICES, CUDA_DEVICE_MAX_CONNECTIONS: the hardware queues, which dlbench sets to 32), as
// {name: value}: part of every result's system, since the same flags under another environment are another
// run.
nlohmann::json run_environment();
// The same as a small text table (what `dlbench info` prints).
std::string system_table(const nlohmann::json& system);
// `dlbench info [--json FILE]`.
void run_info(const std::string& json_path);
std::string iso_date_utc();  // "2026-11-29T16:14:53Z"

}  // namespace dlbench
