// How much device memory a run takes, known before any of it is allocated, and the largest batch that fits.
//
// The memory of a batch is that of an estimate-only plan of the model at that batch (Network::
// plan_memory_only: every layer planned with estimate plans, every tensor placed, nothing allocated, no
// cuDNN search) plus what the trainer allocates beside the network. Apart from workspaces, which are
// bounded by constants, it is affine in the batch, so two estimates give the largest batch that fits and
// one or two more confirm it against the plan itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "backend/backend.h"
#include "models/resnet.h"
#include "train/config.h"

namespace dlbench {

// Device memory kept out of what a run may plan, beyond what is already taken when the backend exists
// (the CUDA context, the cuDNN and cuBLAS handles and cuBLAS's workspace are then already allocated):
// kernel images that cuDNN and cuBLAS load lazily on first use (hundreds of MiB with cuDNN 9's engines),
// cudaMalloc's 2 MiB granularity over the ~70 allocations of a ResNet-152 run (arenas, one batch-norm reserve
// per layer, the trainer's buffers), and the CUDA graph of the step.
constexpr size_t kDeviceMemoryMargin = size_t{1} << 30;

struct MemoryFit {
  int64_t batch = 0;                   // the batch asked for (config.batch_size)
  size_t planned_bytes = 0;            // what a run at `batch` takes (estimated only with a device figure)
  std::optional<DeviceMemory> device;  // nullopt: the backend has no honest figure (CPU); nothing is refused
  size_t usable_bytes = 0;             // the device's free bytes less kDeviceMemoryMargin
  std::optional<int64_t> largest_batch;  // with a device figure: the largest batch whose plan fits (0: none)
  int64_t element_limit_batch = 0;       // past this batch one activation exceeds 2^31 elements (0: unknown)
  bool over_element_limit() const { return device && element_limit_batch > 0 && batch > element_limit_batch; }
  bool fits() const { return !device || (!over_element_limit() && planned_bytes <= usable_bytes); }
};

// The device bytes a run of `config` at `batch` takes on `backend`: the model's estimate-only plan plus
// the trainer's own buffers. Allocates nothing and runs no search.
size_t planned_run_bytes(const RunConfig& config, Backend& backend, const ModelOptions& model, int64_t batch);

// The memory of config.batch_size and the largest batch whose planned_run_bytes fit `device` (its free
// bytes less kDeviceMemoryMargin); batches are also kept below the size at which an activation would
// have 2^31 elements, which cuDNN's tensor descriptors cannot describe.
MemoryFit largest_batch_that_fits(const RunConfig& config, Backend& backend, const ModelOptions& model,
                                  const std::optional<DeviceMemory>& device);
// The same, with the device's figure as the backend states it now.
MemoryFit largest_batch_that_fits(const RunConfig& config, Backend& backend, const ModelOptions& model);

// Throws UserError (one line, naming the largest batch that fits) when `fit` says the batch does not fit.
void require_fit(const MemoryFit& fit);

}  // namespace dlbench
