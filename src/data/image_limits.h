// The bounds of an image size flag (--image-size of data-bench, train and bench): what the transforms can
// make meaningfully, and what the batches it implies take of this machine's memory.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace dlbench {

// One JPEG block: a smaller crop holds less than one 8x8 block of the source and says nothing about the
// pipeline or a model.
inline constexpr int kMinImageSize = 8;
// 16x ImageNet's 224 per side; one fp32 RGB image of it is 192 MiB.
inline constexpr int kMaxImageSize = 4096;

// UserError naming `flag` unless kMinImageSize <= image_size <= kMaxImageSize and the host memory of
// `buffers` batches in flight (buffers x batch_size x channels x image_size^2 x dtype_size(dtype) bytes)
// is at most half of physical memory (require_host_memory, core/machine_limits.h).
void check_image_size(int image_size, int channels, int64_t batch_size, DType dtype, int buffers,
                      const std::string& flag);

}  // namespace dlbench
