// Test images of known content for the JPEG and transform tests.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "data/jpeg_image.h"

namespace dlbench::testing {

// width x height x channels pixels, each value(x, y, c) clamped to 0..255.
inline RgbImage make_image(int width, int height, int channels,
                           const std::function<int(int x, int y, int c)>& value) {
  RgbImage image{width, height, channels, {}};
  image.pixels.resize(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c)
        image.pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(value(x, y, c), 0, 255));
  return image;
}

}  // namespace dlbench::testing
