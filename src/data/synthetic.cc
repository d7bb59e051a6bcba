#include "data/synthetic.h"

#include <vector>

#include "core/status.h"
#include "data/random.h"

namespace dlbench {
namespace {

// UserError for a size or shape no run could mean. Called by each generator below before it allocates:
// the order in which the constructor's arguments are evaluated is unspecified.
void validate(int64_t size, SampleShape shape, int num_classes) {
  DLB_REQUIRE(size >= 1, "synthetic dataset size must be at least 1, got {}", size);
  DLB_REQUIRE(shape.channels >= 1 && shape.height >= 1 && shape.width >= 1,
              "synthetic sample shape {}x{}x{} has a dimension below 1; give channels, height and width >= 1",
              shape.channels, shape.height, shape.width);
  DLB_REQUIRE(num_classes >= 1, "synthetic dataset needs at least 1 class, got {}", num_classes);
  constexpr int64_t max_values = SyntheticDataset::max_bytes / int64_t{sizeof(float)};
  // Divisions, not products: a mistyped dimension must not overflow before it is caught.
  DLB_REQUIRE(shape.channels <= max_values && shape.height <= max_values / shape.channels &&
                  shape.width <= max_values / (shape.channels * shape.height) &&
                  size <= max_values / shape.numel(),
              "a synthetic dataset of {} samples of {}x{}x{} would need more than {} GiB; use fewer samples",
              size, shape.channels, shape.height, shape.width, SyntheticDataset::max_bytes >> 30);
}

// Irwin-Hall: the sum of four 16-bit uniforms from one 64-bit draw, centred and scaled to unit variance.
// Close enough to normal for benchmark inputs, and unlike std::normal_distribution (or Box-Muller through
// libm) it is integer arithmetic and one rounding, hence identical everywhere.
float normalish(std::mt19937_64& rng) {
  const uint64_t r = rng();
  const int64_t sum =
      static_cast<int64_t>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
  // Each term is (x + 0.5) / 65536, uniform on (0, 1) with mean 1/2 and variance 1/12: the sum has mean 2
  // and variance 1/3. (sum + 2 - 2 * 65536) / 65536 * sqrt(3) is the centred, unit-variance value.
  constexpr float scale = 1.7320508075688772f / 65536.0f;
  return static_cast<float>(sum + 2 - 2 * 65536) * scale;
}

std::vector<float> make_images(int64_t size, SampleShape shape, int num_classes, uint64_t seed) {
  validate(size, shape, num_classes);
  std::vector<float> images(static_cast<size_t>(size * shape.numel()));
  std::mt19937_64 rng(data_rng::derive_seed(seed, 0));
  for (float& v : images) v = normalish(rng);
  return images;
}

std::vector<int32_t> make_labels(int64_t size, SampleShape shape, int num_classes, uint64_t seed) {
  validate(size, shape, num_classes);
  std::vector<int32_t> labels(static_cast<size_t>(size));
  std::mt19937_64 rng(data_rng::derive_seed(seed, 1));
  for (int32_t& label : labels)
    label = static_cast<int32_t>(data_rng::uniform_below(rng, static_cast<uint64_t>(num_classes)));
  return labels;
}

}  // namespace

SyntheticDataset::SyntheticDataset(int64_t size, SampleShape shape, int num_classes, uint64_t seed)
    : InMemoryDataset("synthetic", shape, num_classes, make_images(size, shape, num_classes, seed),
                      make_labels(size, shape, num_classes, seed)) {}

}  // namespace dlbench
