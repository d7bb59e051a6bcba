// The GPUs and their connections as the driver's NVML reports them (loaded at run time; absent: empty).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace dlbench {

// {"driver": "580.95", "gpus": [{"index", "name", "memory_bytes", "max_sm_clock_mhz",
// "max_memory_clock_mhz", "power_limit_watts", "nvlinks_active"}...], "topology": [["X", "NV", ...]...]}
// ("topology" with two GPUs or more: NV = NVLink, else nvidia-smi's PCIe path names PIX/PXB/PHB/NODE/SYS).
// Never throws; without the driver: {"nvml": "not available ...", "gpus": []}.
nlohmann::json gpu_info();

// The energy the GPU at `pci_bus_id` ("0000:19:00.0", as CUDA names it) has used since the driver loaded,
// in joules (NVML's counter, Volta and later), where the driver has it. The bus id, not an index: CUDA's
// and NVML's device orders differ under CUDA_VISIBLE_DEVICES.
std::optional<double> gpu_energy_joules(const std::string& pci_bus_id);

// One reading of a GPU's SM clock, power draw and the reasons its clocks are below their maximum.
struct GpuSample {
  double sm_clock_mhz = 0;
  double power_watts = 0;
  uint64_t clock_reasons = 0;  // NVML's clocks-event (throttle) reason bits, kClockReason* below
};
inline constexpr uint64_t kClockReasonPowerCap = 0x4;         // the software power cap (power limit)
inline constexpr uint64_t kClockReasonThermal = 0x20 | 0x40;  // software or hardware thermal slowdown
inline constexpr uint64_t kClockReasonHardware = 0x8 | 0x80;  // hardware slowdown, power brake

// The GPU at `pci_bus_id` now, where the driver has NVML's clock, power and reason queries.
std::optional<GpuSample> gpu_sample(const std::string& pci_bus_id);

}  // namespace dlbench
