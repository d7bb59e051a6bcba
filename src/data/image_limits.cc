#include "data/image_limits.h"

#include "core/machine_limits.h"
#include "core/status.h"

namespace dlbench {

void check_image_size(int image_size, int channels, int64_t batch_size, DType dtype, int buffers,
                      const std::string& flag) {
  DLB_REQUIRE(image_size >= kMinImageSize && image_size <= kMaxImageSize,
              "{} {}: give a size in {}..{} pixels (the side of the square the transform crops)", flag,
              image_size, kMinImageSize, kMaxImageSize);
  DLB_CHECK(channels >= 1 && batch_size >= 1 && buffers >= 1,
            "check_image_size: {} channels, batch {}, {} buffers", channels, batch_size, buffers);
  // In double: a huge batch must not wrap the product around to a small number.
  const double bytes = static_cast<double>(buffers) * static_cast<double>(batch_size) * channels *
                       image_size * static_cast<double>(image_size) * static_cast<double>(dtype_size(dtype));
  const auto capped = bytes >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(bytes);
  require_host_memory(
      capped, fmt::format("{} {}", flag, image_size),
      fmt::format("{} batches in flight of {} x {}x{}x{} {} values (--batch-size {})", buffers, batch_size,
                  channels, image_size, image_size, dtype_name(dtype), batch_size));
}

}  // namespace dlbench
