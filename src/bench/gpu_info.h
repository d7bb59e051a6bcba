// The GPUs and their connections as the driver's NVML reports them (loaded at run time; absent: empty).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

namespace dlbench {

// {"driver": "580.95", "gpus": [{"index", "name", "memory_bytes", "max_sm_clock_mhz",
// "max_memory_clock_mhz", "power_limit_watts", "nvlinks_active"}...], "topology": [["X", "NV", ...]...]}
// ("topology" with two GPUs or more: NV = NVLink, else nvidia-smi's PCIe path names PIX/PXB/PHB/NODE/SYS).
// Never throws; without the driver: {"nvml": "not available ...", "gpus": []}.
nlohmann::json gpu_info();

// The energy GPU `index` has used since the driver loaded (NVML's counter), where the driver has it.
std::optional<double> gpu_energy_joules(int index);

}  // namespace dlbench
