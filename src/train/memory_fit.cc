#include "train/memory_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <map>

#include "core/status.h"
#include "nn/network.h"
#include "train/optimizer.h"

namespace dlbench {

namespace {

struct Estimate {
  size_t bytes = 0;
  int64_t largest_32bit_tensor = 0;  // elements of the largest tensor an op indexes with 32-bit integers
};

Estimate estimate_at(const RunConfig& config, Backend& backend, const ModelOptions& options, int64_t batch) {
  NetworkOptions net_options;
  net_options.batch = batch;
  net_options.layout = config.model.layout;
  net_options.dtype = compute_dtype(config.model.precision);
  net_options.recompute = config.model.recompute;
  if (config.model.precision == Precision::fp8)
    net_options.fp8 = Fp8Recipe{config.model.fp8_amax_history, config.model.fp8_margin};
  Model model = build_model(config.model.name, backend, net_options, options);
  Network& net = *model.net;
  // The optimizer's state as the trainer plans it (AdamW's second moment). The FP32 gradients are counted
  // even where a one-rank run keeps none (MemoryPlan::keep_gradients_in_compute_dtype): the estimate does
  // not know the ranks, and over-counting only costs a little batch.
  prepare_optimizer_memory(net.memory(), config);
  net.plan_memory_only();
  Estimate e;
  e.bytes = net.memory().total_bytes();
  // Beside the network, the trainer holds the FP32 images on the device when it casts them to a narrower
  // compute dtype, and the overflow flag (Trainer's constructor).
  // Token models feed i32 tokens as they are.
  if (model.images && model.images->value.dtype() != DType::f32)
    e.bytes += static_cast<size_t>(model.images->value.numel()) * sizeof(float);
  e.bytes += sizeof(int32_t);
  for (const auto& layer : net.layers())
    e.largest_32bit_tensor = std::max(e.largest_32bit_tensor, layer->largest_32bit_indexed_tensor());
  return e;
}

// The largest batch in [1, limit] that fits (0 if none), confirmed against the plan itself from `guess`
// (the line is exact but for alignment and the placement's greed): find `low` that fits and `high` that
// does not (or the limit), widening from the guess, then bisect.
int64_t largest_that_fits(const std::function<bool(int64_t)>& fits, int64_t guess, int64_t limit) {
  int64_t low = 0, high = 0;
  if (fits(guess)) {
    low = guess;
    for (int64_t step = 1; low < limit; step *= 2) {
      const int64_t next = std::min(limit, low + step);
      if (!fits(next)) {
        high = next;
        break;
      }
      low = next;
    }
  } else {
    high = guess;
    for (int64_t step = 1; high > 1; step *= 2) {
      const int64_t next = std::max<int64_t>(1, high - step);
      if (fits(next)) {
        low = next;
        break;
      }
      high = next;
    }
  }
  while (high > low + 1) {
    const int64_t middle = low + (high - low) / 2;
    (fits(middle) ? low : high) = middle;
  }
  return low;
}

std::string gib(size_t bytes) { return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

size_t planned_run_bytes(const RunConfig& config, Backend& backend, const ModelOptions& model,
                         int64_t batch) {
  return estimate_at(config, backend, model, batch).bytes;
}

MemoryFit largest_batch_that_fits(const RunConfig& config, Backend& backend, const ModelOptions& model) {
  return largest_batch_that_fits(config, backend, model, backend.device_memory());
}

MemoryFit largest_batch_that_fits(const RunConfig& config, Backend& backend, const ModelOptions& model,
                                  const std::optional<DeviceMemory>& device) {
  DLB_CHECK(config.batch_size && *config.batch_size > 0,
            "largest_batch_that_fits needs a resolved batch size");
  std::map<int64_t, Estimate> estimates;
  auto estimate = [&](int64_t batch) -> const Estimate& {
    auto it = estimates.find(batch);
    if (it == estimates.end())
      it = estimates.emplace(batch, estimate_at(config, backend, model, batch)).first;
    return it->second;
  };
  MemoryFit fit;
  fit.batch = *config.batch_size;
  fit.device = device;
  // With no figure to compare with, nothing is estimated: a run's start costs no second planning.
  if (!device) return fit;
  // Activations grow with the batch: past `limit` one would have 2^31 elements, more than a cuDNN tensor
  // descriptor takes, so such a batch cannot even be planned. Known from a plan at batch 1; a language
  // model's logits, which only GEMMs and 64-bit kernels touch, do not count.
  const int64_t per_sample = std::max<int64_t>(1, estimate(1).largest_32bit_tensor);
  const int64_t limit = std::max<int64_t>(1, INT_MAX / per_sample);
  fit.element_limit_batch = limit;
  // The line through two estimates: at the batch asked for (or the limit, for a batch past it) and half.
  const int64_t anchor = std::min(fit.batch, limit);
  const Estimate& asked = estimate(anchor);
  fit.usable_bytes = device->free_bytes > kDeviceMemoryMargin ? device->free_bytes - kDeviceMemoryMargin : 0;
  auto fits = [&](int64_t batch) {
    try {
      return estimate(batch).bytes <= fit.usable_bytes;
    } catch (const Error&) {
      // A batch other than the one asked for that cannot even be planned (a library refusing a shape
      // that large) cannot run either; the search must not fail a run that can.
      if (batch == fit.batch) throw;
      return false;
    }
  };

  const int64_t other = anchor > 1 ? anchor / 2 : 2;
  const double slope = (static_cast<double>(asked.bytes) - static_cast<double>(estimate(other).bytes)) /
                       static_cast<double>(anchor - other);
  // Past the limit, the bytes the line predicts (what such a batch would need if it could be planned).
  fit.planned_bytes = anchor == fit.batch
                          ? asked.bytes
                          : static_cast<size_t>(static_cast<double>(asked.bytes) +
                                                slope * static_cast<double>(fit.batch - anchor));
  int64_t guess = limit;
  if (slope > 0) {
    const double crossing =
        static_cast<double>(anchor) +
        std::floor((static_cast<double>(fit.usable_bytes) - static_cast<double>(asked.bytes)) / slope);
    guess = static_cast<int64_t>(std::clamp(crossing, 1.0, static_cast<double>(limit)));
  }
  fit.largest_batch = largest_that_fits(fits, guess, limit);
  return fit;
}

void require_fit(const MemoryFit& fit) {
  if (fit.fits()) return;
  const int64_t largest = fit.largest_batch.value_or(0);
  if (fit.over_element_limit() && fit.planned_bytes <= fit.usable_bytes) {
    throw_user_error(
        "--batch-size {}: one activation would hold more than 2^31 elements, more than cuDNN takes "
        "in one tensor; the largest batch that fits is {}",
        fit.batch, largest);
  }
  throw_user_error(
      "--batch-size {} needs {} of device memory ({} of it a margin for the CUDA libraries), {} "
      "is free on {}; {}",
      fit.batch, gib(fit.planned_bytes + kDeviceMemoryMargin), gib(kDeviceMemoryMargin),
      gib(fit.device->free_bytes), fit.device->description,
      largest > 0 ? fmt::format("the largest batch that fits is {}", largest)
                  : std::string("not even a batch of 1 fits"));
}

}  // namespace dlbench
