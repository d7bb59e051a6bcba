// The GPUs as NVML describes them: name, memory, maximum clocks, power limit, and how each pair is
// connected (NVLink or the PCIe path), for `dlbench info` and the system block of every result.
//
// NVML comes with the driver, not the toolkit, so it is opened at run time (dlopen of libnvidia-ml.so.1)
// and the few entry points used are declared here with their documented C signatures: a machine without
// the driver gets an empty list, never a failure to start.
#include "bench/gpu_info.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <string>
#include <vector>

namespace dlbench {

namespace {

using nvmlReturn = int;  // 0: NVML_SUCCESS
using nvmlDevice = void*;
struct nvmlMemory {
  unsigned long long total, free, used;
};

struct Nvml {
  nvmlReturn (*init)() = nullptr;
  nvmlReturn (*shutdown)() = nullptr;
  nvmlReturn (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn (*count)(unsigned*) = nullptr;
  nvmlReturn (*handle)(unsigned, nvmlDevice*) = nullptr;
  nvmlReturn (*name)(nvmlDevice, char*, unsigned) = nullptr;
  nvmlReturn (*memory)(nvmlDevice, nvmlMemory*) = nullptr;
  nvmlReturn (*max_clock)(nvmlDevice, int, unsigned*) = nullptr;          // 1: SM, 2: memory
  nvmlReturn (*power_limit)(nvmlDevice, unsigned*) = nullptr;             // milliwatts
  nvmlReturn (*nvlink_state)(nvmlDevice, unsigned, int*) = nullptr;       // link, 1: active
  nvmlReturn (*p2p_status)(nvmlDevice, nvmlDevice, int, int*) = nullptr;  // index 2: NVLink; status 0: OK
  nvmlReturn (*common_ancestor)(nvmlDevice, nvmlDevice, int*) = nullptr;
  nvmlReturn (*energy)(nvmlDevice, unsigned long long*) = nullptr;  // millijoules since driver load
  nvmlReturn (*handle_by_bus_id)(const char*, nvmlDevice*) = nullptr;
  nvmlReturn (*clock)(nvmlDevice, int, unsigned*) = nullptr;  // current clock; 1: SM
  nvmlReturn (*power)(nvmlDevice, unsigned*) = nullptr;       // milliwatts
  nvmlReturn (*clock_reasons)(nvmlDevice, unsigned long long*) = nullptr;
  bool ok = false;
};

// Opened and initialised once per process; never closed (NVML may be used until exit).
const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto load = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      return fn != nullptr;
    };
    bool all = load(n.init, "nvmlInit_v2") && load(n.shutdown, "nvmlShutdown") &&
               load(n.driver_version, "nvmlSystemGetDriverVersion") &&
               load(n.count, "nvmlDeviceGetCount_v2") && load(n.handle, "nvmlDeviceGetHandleByIndex_v2") &&
               load(n.name, "nvmlDeviceGetName") && load(n.memory, "nvmlDeviceGetMemoryInfo") &&
               load(n.max_clock, "nvmlDeviceGetMaxClockInfo") &&
               load(n.power_limit, "nvmlDeviceGetPowerManagementLimit");
    // Optional: older drivers may lack them.
    load(n.nvlink_state, "nvmlDeviceGetNvLinkState");
    load(n.p2p_status, "nvmlDeviceGetP2PStatus");
    load(n.common_ancestor, "nvmlDeviceGetTopologyCommonAncestor");
    load(n.energy, "nvmlDeviceGetTotalEnergyConsumption");
    load(n.handle_by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    load(n.clock, "nvmlDeviceGetClockInfo");
    load(n.power, "nvmlDeviceGetPowerUsage");
    // The reasons' query was renamed (throttle -> clocks event); drivers keep the old name too.
    if (!load(n.clock_reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
      load(n.clock_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    n.ok = all && n.init() == 0;
  });
  return n;
}

std::vector<nvmlDevice> devices() {
  const Nvml& n = nvml();
  std::vector<nvmlDevice> list;
  unsigned count = 0;
  if (!n.ok || n.count(&count) != 0) return list;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice d = nullptr;
    if (n.handle(i, &d) == 0) list.push_back(d);
  }
  return list;
}

// nvidia-smi topo's names for the PCIe path between two GPUs.
const char* path_name(int level) {
  switch (level) {
    case 0:
      return "X";
    case 10:
      return "PIX";  // one PCIe switch
    case 20:
      return "PXB";  // several PCIe switches
    case 30:
      return "PHB";  // a PCIe host bridge
    case 40:
      return "NODE";  // host bridges within a NUMA node
    case 50:
      return "SYS";  // across NUMA nodes (SMP interconnect)
    default:
      return "?";
  }
}

}  // namespace

nlohmann::json gpu_info() {
  nlohmann::json j = nlohmann::json::object();
  const Nvml& n = nvml();
  if (!n.ok) {
    j["nvml"] = "not available (no NVIDIA driver)";
    j["gpus"] = nlohmann::json::array();
    return j;
  }
  char text[96] = {0};
  if (n.driver_version(text, sizeof text) == 0) j["driver"] = text;
  const std::vector<nvmlDevice> list = devices();
  nlohmann::json gpus = nlohmann::json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    nlohmann::json g;
    g["index"] = i;
    if (n.name(list[i], text, sizeof text) == 0) g["name"] = text;
    nvmlMemory memory{};
    if (n.memory(list[i], &memory) == 0) g["memory_bytes"] = memory.total;
    unsigned value = 0;
    if (n.max_clock(list[i], 1, &value) == 0) g["max_sm_clock_mhz"] = value;
    if (n.max_clock(list[i], 2, &value) == 0) g["max_memory_clock_mhz"] = value;
    if (n.power_limit(list[i], &value) == 0) g["power_limit_watts"] = value / 1000.0;
    if (n.nvlink_state) {
      int active = 0;
      for (unsigned link = 0; link < 18; ++link) {
        int state = 0;
        if (n.nvlink_state(list[i], link, &state) == 0 && state == 1) ++active;
      }
      g["nvlinks_active"] = active;
    }
    gpus.push_back(g);
  }
  j["gpus"] = gpus;
  // The matrix nvidia-smi topo -m prints: NV<links> where two GPUs talk over NVLink, else the PCIe path.
  if (list.size() > 1) {
    nlohmann::json matrix = nlohmann::json::array();
    for (size_t a = 0; a < list.size(); ++a) {
      nlohmann::json row = nlohmann::json::array();
      for (size_t b = 0; b < list.size(); ++b) {
        // A C string: GCC 12 warns falsely (-Wrestrict) on the std::string assignment this was.
        const char* cell = "X";
        if (a != b) {
          int status = -1, level = -1;
          if (n.p2p_status && n.p2p_status(list[a], list[b], 2, &status) == 0 && status == 0) {
            cell = "NV";
          } else if (n.common_ancestor && n.common_ancestor(list[a], list[b], &level) == 0) {
            cell = path_name(level);
          } else {
            cell = "?";
          }
        }
        row.push_back(cell);
      }
      matrix.push_back(row);
    }
    j["topology"] = matrix;
  }
  return j;
}

std::optional<double> gpu_energy_joules(const std::string& pci_bus_id) {
  const Nvml& n = nvml();
  if (!n.ok || !n.energy || !n.handle_by_bus_id || pci_bus_id.empty()) return std::nullopt;
  nvmlDevice device = nullptr;
  if (n.handle_by_bus_id(pci_bus_id.c_str(), &device) != 0) return std::nullopt;
  unsigned long long millijoules = 0;
  if (n.energy(device, &millijoules) != 0) return std::nullopt;
  return static_cast<double>(millijoules) / 1e3;
}

std::optional<GpuSample> gpu_sample(const std::string& pci_bus_id) {
  const Nvml& n = nvml();
  if (!n.ok || !n.clock || !n.power || !n.clock_reasons || !n.handle_by_bus_id || pci_bus_id.empty())
    return std::nullopt;
  nvmlDevice device = nullptr;
  if (n.handle_by_bus_id(pci_bus_id.c_str(), &device) != 0) return std::nullopt;
  unsigned mhz = 0, milliwatts = 0;
  unsigned long long reasons = 0;
  if (n.clock(device, /*NVML_CLOCK_SM=*/1, &mhz) != 0 || n.power(device, &milliwatts) != 0 ||
      n.clock_reasons(device, &reasons) != 0)
    return std::nullopt;
  return GpuSample{static_cast<double>(mhz), milliwatts / 1e3, static_cast<uint64_t>(reasons)};
}

}  // namespace dlbench
