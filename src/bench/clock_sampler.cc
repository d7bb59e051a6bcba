#include "bench/clock_sampler.h"

#include "bench/measure.h"
#include "core/status.h"

namespace dlbench {

ClockSummary summarize_clock_samples(const std::vector<GpuSample>& samples) {
  DLB_CHECK(!samples.empty(), "no clock samples to summarise");
  ClockSummary s;
  s.samples = static_cast<int>(samples.size());
  std::vector<double> clocks;
  for (const GpuSample& g : samples) {
    clocks.push_back(g.sm_clock_mhz);
    s.power_mean_watts += g.power_watts;
    s.power_capped += (g.clock_reasons & kClockReasonPowerCap) ? 1 : 0;
    s.thermal += (g.clock_reasons & kClockReasonThermal) ? 1 : 0;
    s.hardware_slowdown += (g.clock_reasons & kClockReasonHardware) ? 1 : 0;
  }
  const Distribution d = summarize(clocks);
  s.sm_clock_median_mhz = d.median;
  s.sm_clock_min_mhz = d.min;
  s.sm_clock_max_mhz = d.max;
  for (double* f : {&s.power_mean_watts, &s.power_capped, &s.thermal, &s.hardware_slowdown})
    *f /= static_cast<double>(samples.size());
  return s;
}

ClockSampler::ClockSampler(std::string pci_bus_id, std::chrono::milliseconds period)
    : bus_id_(std::move(pci_bus_id)), period_(period) {
  // One reading first: where NVML cannot read this GPU no thread starts.
  if (auto first = gpu_sample(bus_id_)) {
    samples_.push_back(*first);
    thread_ = std::thread([this] { run(); });
  }
}

ClockSampler::~ClockSampler() { stop(); }

void ClockSampler::run() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    const std::optional<GpuSample> sample = gpu_sample(bus_id_);
    lock.lock();
    if (sample) samples_.push_back(*sample);
  }
}

std::optional<ClockSummary> ClockSampler::stop() {
  if (!thread_.joinable()) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (auto last = gpu_sample(bus_id_)) samples_.push_back(*last);
  return summarize_clock_samples(samples_);
}

}  // namespace dlbench
