// The batched GPU augmentation (data/cuda/image_augment.h) against the CPU path's crop_resize_normalize,
// image by image: random 8-bit images of odd sizes, RGB and gray, decoded at 8/8, 4/8 and 2/8, rows padded
// past width * channels; boxes from random_resized_crop_box (fixed seed) and center_crop_box, some reaching
// outside the image; flip on and off; f32, f16 and bf16; NHWC and NCHW; square and odd output sizes.
//
// Tolerances. The kernel repeats the CPU's arithmetic operation for operation (source coordinates in
// double, the CPU's own table of normalised values, unfused float lerps), so on an x86-64 host built
// without FMA the two agree bit for bit. f32 is allowed 1e-6 absolute (about 4 ulp at the largest
// normalised values, |v| < 2.7) so that a host compiler contracting a * b + c into an FMA (-march with FMA
// and GCC's default -ffp-contract=fast) does not fail it; f16 and bf16 are allowed one unit in the last
// place of the output dtype (an f32 difference of one ulp can move a value across a rounding boundary).
// A half-pixel shift or a wrong flip changes values by tenths: SensitiveToFlipAndHalfPixelShift shows the
// comparison catches both.
#include <gtest/gtest.h>

#ifndef DLBENCH_WITH_CUDA
TEST(CudaImageAugment, Skipped) { GTEST_SKIP() << "no CUDA GPU: dlbench was built without CUDA"; }
#else

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/reference/half_float.h"
#include "core/status.h"
#include "cuda_kernels_test_util.h"
#include "data/cuda/image_augment.h"
#include "data/image_transform.h"
#include "data/jpeg_image.h"

namespace dlbench {
namespace {

using cuda::AugmentImage;
using cuda::AugmentOutput;
using cuda::Flip;
using testing::DeviceBuffer;

// A decoded image as the GPU path holds it: `decoded` is the CPU's copy (dense rows), the device copy
// has rows of `pitch` bytes (padding filled with noise the kernel must never read).
struct TestImage {
  int full_w, full_h, scale_eighths;
  RgbImage decoded;
  int pitch;
  CropBox box;
};

TestImage random_image(int full_w, int full_h, int scale_eighths, int channels, std::mt19937_64& rng) {
  TestImage t{full_w, full_h, scale_eighths, {}, 0, {}};
  t.decoded.width = dct_scaled_size(full_w, scale_eighths);
  t.decoded.height = dct_scaled_size(full_h, scale_eighths);
  t.decoded.channels = channels;
  t.decoded.pixels.resize(size_t(t.decoded.width) * t.decoded.height * channels);
  for (uint8_t& p : t.decoded.pixels) p = static_cast<uint8_t>(rng());
  t.pitch = t.decoded.width * channels + 13;
  return t;
}

// The batch's pixels in one device buffer, image after image at their pitch.
class DeviceImages {
 public:
  explicit DeviceImages(const std::vector<TestImage>& images) {
    std::vector<uint8_t> bytes;
    std::vector<size_t> offsets;
    for (const TestImage& t : images) {
      offsets.push_back(bytes.size());
      const size_t row = size_t(t.decoded.width) * t.decoded.channels;
      for (int y = 0; y < t.decoded.height; ++y) {
        const uint8_t* src = t.decoded.pixels.data() + y * row;
        bytes.insert(bytes.end(), src, src + row);
        for (size_t i = row; i < size_t(t.pitch); ++i) bytes.push_back(static_cast<uint8_t>(i * 37 + y));
      }
    }
    buffer_ = std::make_unique<DeviceBuffer>(bytes.size());
    buffer_->upload(bytes.data(), bytes.size());
    for (size_t i = 0; i < images.size(); ++i) base_.push_back(buffer_->as<uint8_t>() + offsets[i]);
  }
  AugmentImage image(const TestImage& t, size_t index, Flip flip) const {
    AugmentImage a;
    a.pixels = base_[index];
    a.width = t.decoded.width, a.height = t.decoded.height, a.pitch = t.pitch;
    a.channels = t.decoded.channels, a.scale_eighths = t.scale_eighths;
    a.box = t.box, a.flip = flip;
    return a;
  }

 private:
  std::unique_ptr<DeviceBuffer> buffer_;
  std::vector<const uint8_t*> base_;
};

// Images of every kind the kernel takes, with random and centre boxes.
// The images marked gray have `gray_channels` channels (1: gray, 3: RGB like the others).
std::vector<TestImage> mixed_batch(int gray_channels) {
  std::mt19937_64 rng(20240611);
  std::vector<TestImage> batch;
  auto add = [&](int w, int h, int scale, int channels) -> TestImage& {
    batch.push_back(random_image(w, h, scale, channels, rng));
    return batch.back();
  };
  std::mt19937_64 boxes(7);  // the CPU path's box RNG, one seed for the whole batch
  add(37, 29, 8, 3).box = random_resized_crop_box(37, 29, boxes);
  add(500, 375, 4, 3).box = random_resized_crop_box(500, 375, boxes);  // decoded 250 x 188
  add(333, 251, 2, 3).box = random_resized_crop_box(333, 251, boxes);  // decoded 84 x 63
  add(61, 47, 8, gray_channels).box = random_resized_crop_box(61, 47, boxes);
  add(375, 500, 4, gray_channels).box = random_resized_crop_box(375, 500, boxes);
  add(500, 375, 8, 3).box = center_crop_box(500, 375, 256, 224);
  add(37, 29, 8, 3).box = center_crop_box(37, 29, 256, 224);
  add(23, 41, 8, 3).box = center_crop_box(23, 41, 160, 224);              // past the left and right
  add(41, 23, 4, gray_channels).box = center_crop_box(41, 23, 100, 121);  // past the top and bottom
  add(1, 1, 8, 3).box = random_resized_crop_box(1, 1, boxes);
  add(19, 17, 8, 3).box = CropBox{-10, -12, 6, 5};        // wholly outside, above-left: the corner pixel
  add(19, 17, 8, 3).box = CropBox{15.5, 3.25, 9.75, 20};  // past the right and bottom edges
  return batch;
}

// CPU reference of one sample: a gray image into 3 channels is replicated first, as decode_jpeg does.
std::vector<uint8_t> cpu_sample(const TestImage& t, const CropBox& box, bool flip, const AugmentOutput& out,
                                const Normalization& norm) {
  RgbImage image = t.decoded;
  if (image.channels == 1 && out.channels == 3) {
    image.channels = 3;
    image.pixels.resize(t.decoded.pixels.size() * 3);
    for (size_t i = 0; i < t.decoded.pixels.size(); ++i)
      image.pixels[3 * i] = image.pixels[3 * i + 1] = image.pixels[3 * i + 2] = t.decoded.pixels[i];
  }
  std::vector<uint8_t> bytes(size_t(out.width) * out.height * out.channels * dtype_size(out.dtype));
  crop_resize_normalize(image, t.scale_eighths, box, out.width, out.height, flip, norm, out.dtype, out.layout,
                        bytes.data());
  return bytes;
}

// 16-bit floats as integers ordered like their values (+0 and -0 both 0): neighbours differ by 1.
int ordered(uint16_t bits) { return bits & 0x8000 ? -int(bits & 0x7fff) : int(bits); }

struct Difference {
  int64_t wrong = 0;  // values beyond the tolerance (or NaN: not written)
  double max_abs = 0;
};

Difference compare(const uint8_t* gpu, const uint8_t* cpu, size_t values, DType dtype) {
  Difference d;
  for (size_t i = 0; i < values; ++i) {
    double a, b;
    bool ok;
    if (dtype == DType::f32) {
      float fa, fb;
      std::memcpy(&fa, gpu + 4 * i, 4);
      std::memcpy(&fb, cpu + 4 * i, 4);
      a = fa, b = fb;
      ok = std::abs(a - b) <= 1e-6;
    } else {
      uint16_t ba, bb;
      std::memcpy(&ba, gpu + 2 * i, 2);
      std::memcpy(&bb, cpu + 2 * i, 2);
      a = dtype == DType::f16 ? f16_to_double(ba) : bf16_to_double(ba);
      b = dtype == DType::f16 ? f16_to_double(bb) : bf16_to_double(bb);
      ok = !std::isnan(a) && std::abs(ordered(ba) - ordered(bb)) <= 1;
    }
    d.wrong += !ok;
    if (std::isnan(a) || std::isnan(b))
      d.max_abs = INFINITY;
    else
      d.max_abs = std::max(d.max_abs, std::abs(a - b));
  }
  return d;
}

class CudaImageAugment : public testing::CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (!IsSkipped()) augmenter_ = std::make_unique<cuda::ImageAugmenter>(64);
  }
  void TearDown() override {
    augmenter_.reset();
    CudaKernelTest::TearDown();
  }

  // Runs the batch (image i flipped when flips[i]) and returns the output buffer's bytes; the buffer is
  // filled with 0xff (NaN in every dtype) first, and 64 bytes past the batch must keep it.
  std::vector<uint8_t> run(const std::vector<TestImage>& batch, const std::vector<bool>& flips,
                           const AugmentOutput& shape, const Normalization& norm) {
    const DeviceImages images(batch);
    std::vector<AugmentImage> items;
    for (size_t i = 0; i < batch.size(); ++i)
      items.push_back(images.image(batch[i], i, flips[i] ? Flip::horizontal : Flip::none));
    const size_t bytes = batch.size() * sample_bytes(shape);
    std::vector<uint8_t> host(bytes + 64, 0xff);
    DeviceBuffer y(host.size());
    y.upload(host.data(), host.size());
    AugmentOutput out = shape;
    out.data = y.get();
    augmenter_->run(items, out, norm, stream_);
    sync();
    y.download(host.data(), host.size());
    for (size_t i = bytes; i < host.size(); ++i)
      EXPECT_EQ(host[i], 0xff) << "byte " << i << " past the batch";
    host.resize(bytes);
    return host;
  }
  static size_t sample_bytes(const AugmentOutput& s) {
    return size_t(s.width) * s.height * s.channels * dtype_size(s.dtype);
  }
  // Every sample against the CPU's; returns the total of wrong values.
  int64_t check(const std::vector<TestImage>& batch, const std::vector<bool>& flips,
                const AugmentOutput& shape, const Normalization& norm) {
    const std::vector<uint8_t> gpu = run(batch, flips, shape, norm);
    const size_t per_sample = sample_bytes(shape);
    int64_t wrong = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const std::vector<uint8_t> cpu = cpu_sample(batch[i], batch[i].box, flips[i], shape, norm);
      const Difference d =
          compare(gpu.data() + i * per_sample, cpu.data(), per_sample / dtype_size(shape.dtype), shape.dtype);
      EXPECT_EQ(d.wrong, 0) << "image " << i << " (" << batch[i].full_w << "x" << batch[i].full_h << " at "
                            << batch[i].scale_eighths << "/8, " << batch[i].decoded.channels
                            << " channels, flip " << flips[i] << "): max |gpu - cpu| " << d.max_abs;
      wrong += d.wrong;
    }
    return wrong;
  }

  std::unique_ptr<cuda::ImageAugmenter> augmenter_;  // batches of up to 64 images
};

std::string trace(const AugmentOutput& s) {
  return std::string(dtype_name(s.dtype)) + " " + layout_name(s.layout) + " " + std::to_string(s.width) +
         "x" + std::to_string(s.height) + "x" + std::to_string(s.channels);
}

std::vector<bool> alternating(size_t n, bool first) {
  std::vector<bool> flips(n);
  for (size_t i = 0; i < n; ++i) flips[i] = (i % 2 == 0) == first;
  return flips;
}

TEST_F(CudaImageAugment, MatchesTheCpuPathForEveryDtypeAndLayout) {
  const std::vector<TestImage> batch = mixed_batch(1);  // gray images into 3 channels: replicated
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (Layout layout : {Layout::nhwc, Layout::nchw})
      for (auto [w, h] : {std::pair{224, 224}, std::pair{17, 31}})
        for (bool first_flipped : {false, true}) {
          const AugmentOutput shape{nullptr, w, h, 3, dtype, layout};
          SCOPED_TRACE(trace(shape) + (first_flipped ? " flips odd" : " flips even"));
          check(batch, alternating(batch.size(), first_flipped), shape, kImageNetNormalization);
        }
}

TEST_F(CudaImageAugment, GrayIntoOneChannelWithItsOwnNormalization) {
  std::vector<TestImage> batch = mixed_batch(1);
  std::erase_if(batch, [](const TestImage& t) { return t.decoded.channels != 1; });
  ASSERT_EQ(batch.size(), 3u);
  const Normalization norm{{0.5f, 0.f, 0.f}, {0.25f, 1.f, 1.f}};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (Layout layout : {Layout::nhwc, Layout::nchw}) {
      const AugmentOutput shape{nullptr, 45, 38, 1, dtype, layout};
      SCOPED_TRACE(trace(shape));
      check(batch, alternating(batch.size(), true), shape, norm);
    }
}

TEST_F(CudaImageAugment, RgbWithItsOwnNormalization) {
  const std::vector<TestImage> batch = mixed_batch(3);
  const Normalization norm{{0.1f, 0.5f, 0.9f}, {0.3f, 0.07f, 2.f}};
  const AugmentOutput shape{nullptr, 64, 48, 3, DType::f32, Layout::nchw};
  check(batch, alternating(batch.size(), false), shape, norm);
}

// The comparison is not blind: the right answer passes, a mirrored one and one half a pixel off do not.
TEST_F(CudaImageAugment, SensitiveToFlipAndHalfPixelShift) {
  std::vector<TestImage> batch = mixed_batch(3);
  batch.resize(3);  // random crops of RGB images at 8/8, 4/8 and 2/8
  const AugmentOutput shape{nullptr, 224, 224, 3, DType::f32, Layout::nhwc};
  const std::vector<uint8_t> gpu = run(batch, {true, true, true}, shape, kImageNetNormalization);
  const size_t per_sample = sample_bytes(shape), values = per_sample / 4;
  for (size_t i = 0; i < batch.size(); ++i) {
    const TestImage& t = batch[i];
    CropBox shifted = t.box;
    shifted.x += 0.5 * 8 / t.scale_eighths;  // half a decoded pixel, in full-size pixels
    const uint8_t* sample = gpu.data() + i * per_sample;
    const auto right = cpu_sample(t, t.box, true, shape, kImageNetNormalization);
    const auto mirrored = cpu_sample(t, t.box, false, shape, kImageNetNormalization);
    const auto off = cpu_sample(t, shifted, true, shape, kImageNetNormalization);
    EXPECT_EQ(compare(sample, right.data(), values, DType::f32).wrong, 0) << "image " << i;
    EXPECT_GT(compare(sample, mirrored.data(), values, DType::f32).wrong, int64_t(values / 2))
        << "image " << i;
    EXPECT_GT(compare(sample, off.data(), values, DType::f32).wrong, int64_t(values / 2)) << "image " << i;
  }
}

// Many batches through the two staging slots, on two streams in turn: each batch is the CPU's.
TEST_F(CudaImageAugment, ConsecutiveBatchesOnTwoStreams) {
  const std::vector<TestImage> batch = mixed_batch(3);
  const DeviceImages images(batch);
  const AugmentOutput shape{nullptr, 32, 24, 3, DType::f16, Layout::nhwc};
  const size_t per_sample = sample_bytes(shape), rounds = 6;
  DeviceBuffer y(rounds * batch.size() * per_sample);
  cudaStream_t other = nullptr;
  DLB_KERNEL_CHECK(cudaStreamCreate(&other));
  for (size_t r = 0; r < rounds; ++r) {
    std::vector<AugmentImage> items;  // round r flips image i when (i + r) is odd
    for (size_t i = 0; i < batch.size(); ++i)
      items.push_back(images.image(batch[i], i, (i + r) % 2 ? Flip::horizontal : Flip::none));
    AugmentOutput out = shape;
    out.data = y.as<uint8_t>() + r * batch.size() * per_sample;
    augmenter_->run(items, out, kImageNetNormalization, r % 2 ? other : stream_);
  }
  DLB_KERNEL_CHECK(cudaStreamSynchronize(other));
  sync();
  DLB_KERNEL_CHECK(cudaStreamDestroy(other));
  std::vector<uint8_t> host(rounds * batch.size() * per_sample);
  y.download(host.data(), host.size());
  for (size_t r = 0; r < rounds; ++r)
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto cpu = cpu_sample(batch[i], batch[i].box, (i + r) % 2 != 0, shape, kImageNetNormalization);
      const uint8_t* gpu = host.data() + (r * batch.size() + i) * per_sample;
      EXPECT_EQ(compare(gpu, cpu.data(), per_sample / 2, DType::f16).wrong, 0)
          << "round " << r << " image " << i;
    }
}

TEST_F(CudaImageAugment, RefusesBadArguments) {
  std::vector<TestImage> batch = mixed_batch(1);
  const DeviceImages images(batch);
  DeviceBuffer y(1 << 20);
  const AugmentOutput good{y.get(), 16, 16, 3, DType::f16, Layout::nhwc};
  const AugmentImage rgb = images.image(batch[0], 0, Flip::none);
  auto run_one = [&](const AugmentImage& image, const AugmentOutput& out, const Normalization& norm) {
    augmenter_->run(std::vector<AugmentImage>{image}, out, norm, stream_);
  };
  EXPECT_NO_THROW(run_one(rgb, good, kImageNetNormalization));
  auto bad_image = [&](auto edit) {
    AugmentImage image = rgb;
    edit(image);
    EXPECT_THROW(run_one(image, good, kImageNetNormalization), Error);
  };
  bad_image([](AugmentImage& a) { a.channels = 2; });
  bad_image([](AugmentImage& a) { a.pitch = a.width * 3 - 1; });
  bad_image([](AugmentImage& a) { a.scale_eighths = 0; });
  bad_image([](AugmentImage& a) { a.pixels = nullptr; });
  bad_image([](AugmentImage& a) { a.box.width = 0; });
  bad_image([](AugmentImage& a) { a.box.x = NAN; });
  auto bad_output = [&](auto edit) {
    AugmentOutput out = good;
    edit(out);
    EXPECT_THROW(run_one(rgb, out, kImageNetNormalization), Error);
  };
  bad_output([](AugmentOutput& o) { o.channels = 4; });
  bad_output([](AugmentOutput& o) { o.dtype = DType::f64; });
  bad_output([](AugmentOutput& o) { o.width = 0; });
  bad_output([](AugmentOutput& o) { o.data = nullptr; });
  Normalization zero_std = kImageNetNormalization;
  zero_std.std[2] = 0;
  EXPECT_THROW(run_one(rgb, good, zero_std), Error);
  const std::vector<AugmentImage> too_many(65, rgb);
  EXPECT_THROW(augmenter_->run(too_many, good, kImageNetNormalization, stream_), Error);
  EXPECT_THROW(cuda::ImageAugmenter(0), Error);
  sync();
}

}  // namespace
}  // namespace dlbench

#endif  // DLBENCH_WITH_CUDA
