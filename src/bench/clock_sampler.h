// What clocks a measured window ran at: a thread samples the GPU's SM clock, power draw and NVML's
// clock-event reasons every few tens of milliseconds while the window runs. A GPU held at its power limit
// lowers its clocks by a few percent under heavier work (on an H200 at 700 W, ResNet-50 fp16 on two GPUs
// ran at a median 1920 MHz where one GPU alone ran at 1965), so a result that says so explains a slower
// point that no software setting would.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/gpu_info.h"

namespace dlbench {

struct ClockSummary {
  int samples = 0;
  double sm_clock_median_mhz = 0, sm_clock_min_mhz = 0, sm_clock_max_mhz = 0;
  double power_mean_watts = 0;
  // Fractions of the samples whose clocks were held back by each reason (a sample may have several).
  double power_capped = 0, thermal = 0, hardware_slowdown = 0;
};

// `samples` must not be empty.
ClockSummary summarize_clock_samples(const std::vector<GpuSample>& samples);

class ClockSampler {
 public:
  // Starts sampling the GPU at `pci_bus_id` (CUDA's bus id); does nothing where NVML cannot read it.
  explicit ClockSampler(std::string pci_bus_id,
                        std::chrono::milliseconds period = std::chrono::milliseconds(50));
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  // Stops sampling; the summary of what was read (one sample at least: the last is taken at stop), or
  // nothing where NVML could not read this GPU.
  std::optional<ClockSummary> stop();
  std::chrono::milliseconds period() const { return period_; }

 private:
  void run();
  std::string bus_id_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<GpuSample> samples_;
  std::thread thread_;
};

}  // namespace dlbench
