// Test images of known content for the JPEG and transform tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

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

// Smooth gradients, a hard-edged coloured rectangle and a little noise (seeded): the frequencies of a photo,
// and colour edges where chroma upsampling shows. `phase` shifts the gradients, for photos that differ in
// more than their noise. Interleaved, width x height x channels.
inline std::vector<uint8_t> photo_like(int width, int height, int channels, uint64_t seed, double phase = 0) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> noise(-6, 6);
  std::vector<uint8_t> p(size_t(width) * height * channels);
  const int rx = width / 5, ry = height / 4, rw = width / 3, rh = height / 3;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c) {
        double v = 120 + 60 * std::sin(0.031 * x + 0.017 * y + 2.1 * c + phase) +
                   35 * std::cos(0.07 * y - 0.011 * x * c);
        if (x >= rx && x < rx + rw && y >= ry && y < ry + rh) v = c == 0 ? 220 : (c == 1 ? 40 : 90);
        v += noise(rng);
        p[(size_t(y) * width + x) * channels + c] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return p;
}

}  // namespace dlbench::testing
