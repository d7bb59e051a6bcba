#include "backend/backend.h"
#include "core/status.h"

namespace dlbench {

void check_conv_geometry(const ConvGeometry& g) {
  DLB_CHECK(g.batch > 0 && g.in_channels > 0 && g.in_h > 0 && g.in_w > 0 && g.out_channels > 0,
            "conv: sizes must be positive (batch {}, in_channels {}, in {}x{}, out_channels {})", g.batch,
            g.in_channels, g.in_h, g.in_w, g.out_channels);
  DLB_CHECK(
      g.kernel_h > 0 && g.kernel_w > 0 && g.stride_h > 0 && g.stride_w > 0 && g.pad_h >= 0 && g.pad_w >= 0,
      "conv: kernel {}x{}, stride {}x{}, pad {}x{} are invalid", g.kernel_h, g.kernel_w, g.stride_h,
      g.stride_w, g.pad_h, g.pad_w);
  DLB_CHECK(g.in_h + 2 * g.pad_h >= g.kernel_h && g.in_w + 2 * g.pad_w >= g.kernel_w,
            "conv: kernel {}x{} is larger than the padded input {}x{}", g.kernel_h, g.kernel_w,
            g.in_h + 2 * g.pad_h, g.in_w + 2 * g.pad_w);
}

}  // namespace dlbench
