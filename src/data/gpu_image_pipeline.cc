// Without CUDA there is no GPU to decode on: the factory refuses (resolve_decode never picks the GPU in
// such a build, since no run there has a GPU device). The CUDA build's is in data/cuda/.
#include "data/gpu_image_pipeline.h"

#include <fmt/format.h>

#include "core/status.h"

namespace dlbench {

std::string pipeline_profile(const GpuPipelineStats& before, const GpuPipelineStats& after, int64_t batches) {
  const double per = batches > 0 ? 1e3 / static_cast<double>(batches) : 0;
  return fmt::format(
      "read {:.1f} (idle {:.1f}) | decode {:.1f} (GPU wait {:.1f}), on the CPU {:.1f}, augment {:.1f} (idle "
      "{:.1f}) "
      "ms per batch",
      per * (after.read_seconds - before.read_seconds),
      per * (after.read_idle_seconds - before.read_idle_seconds),
      per * (after.decode_seconds - before.decode_seconds),
      per * (after.gpu_wait_seconds - before.gpu_wait_seconds),
      per * (after.cpu_decode_seconds - before.cpu_decode_seconds),
      per * (after.augment_seconds - before.augment_seconds),
      per * (after.decode_idle_seconds - before.decode_idle_seconds));
}

}  // namespace dlbench

#ifndef DLBENCH_WITH_CUDA
namespace dlbench {

std::unique_ptr<GpuImagePipeline> make_gpu_image_pipeline(const ImageDataset&, GpuPipelineOptions) {
  throw_user_error("--decode gpu: this build of dlbench has no CUDA; use --decode cpu");
}

}  // namespace dlbench
#endif
