// The GPU input pipeline (data/gpu_image_pipeline.h) against the CPU path (ImageDataset::gather), on a GPU
// with nvJPEG (skipped elsewhere):
// - the same samples, labels and crop boxes batch for batch; pixels within the decoders' differences. Two
//   references: the CPU path's own output (libjpeg-turbo decodes DCT-scaled where the box allows, nvJPEG at
//   full size, so the resampling differs too), and libjpeg-turbo at full size with the same box (only the
//   IDCT and chroma upsampling differ). Mean and largest |difference| in 8-bit levels, per dtype and
//   layout, are printed and bounded;
// - every bad file of the CPU path's tests decodes, falls back to the CPU, or is skipped and counted, and
//   --strict names it;
// - 1,000 batches in a row leave device memory where the first ones left it.
#include <gtest/gtest.h>

#ifndef DLBENCH_WITH_CUDA
TEST(GpuImagePipeline, Skipped) { GTEST_SKIP() << "no CUDA GPU: dlbench was built without CUDA"; }
#else

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/reference/reference_common.h"
#include "core/status.h"
#include "cuda_kernels_test_util.h"
#include "data/gpu_image_pipeline.h"
#include "data/image_dataset.h"
#include "data/image_source.h"
#include "data/image_test_util.h"
#include "data/jpeg_image.h"
#include "data/nvjpeg_library.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_file;

using testing::photo_like;

std::string jpeg(int width, int height, int channels, uint64_t seed, JpegEncodeOptions options = {}) {
  // The phase varies the content from photo to photo, not only the noise.
  const std::vector<uint8_t> pixels = photo_like(width, height, channels, seed, double(seed % 7));
  const std::vector<uint8_t> bytes = encode_jpeg(pixels.data(), width, height, channels, 90, options);
  return std::string(bytes.begin(), bytes.end());
}

class GpuImagePipelineTest : public testing::CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (IsSkipped()) return;
    std::string why_not;
    if (!NvjpegLibrary::open(&why_not)) GTEST_SKIP() << "no nvJPEG: " << why_not;
  }

  // A pipeline over `data` for `count` batches of `batch`, batch n taking samples n*batch.. (mod size).
  std::unique_ptr<GpuImagePipeline> pipeline(const ImageDataset& data, int64_t batch, int64_t count,
                                             DType dtype, Layout layout) {
    const SampleShape shape = data.sample_shape();
    GpuPipelineOptions o;
    o.image_dims = {batch, shape.channels, shape.height, shape.width};
    o.dtype = dtype;
    o.layout = layout;
    o.count = count;
    const int64_t size = data.size();
    o.indices = [batch, size](int64_t n) { return indices_of(n, batch, size); };
    return make_gpu_image_pipeline(data, o);
  }

  static std::vector<int64_t> indices_of(int64_t n, int64_t batch, int64_t size) {
    std::vector<int64_t> indices(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) indices[static_cast<size_t>(i)] = (n * batch + i) % size;
    return indices;
  }
};

// |a - b| in 8-bit levels of channel c: normalised values times std * 255.
struct Difference {
  double mean = 0, max = 0;
};

Difference compare_batches(const HostBuffer& gpu, const HostBuffer& cpu, const Normalization& norm) {
  const Tensor& t = gpu.tensor();
  Difference d;
  double sum = 0;
  for (int64_t n = 0; n < t.n(); ++n)
    for (int64_t c = 0; c < t.c(); ++c)
      for (int64_t h = 0; h < t.h(); ++h)
        for (int64_t w = 0; w < t.w(); ++w) {
          const int64_t at = t.offset(n, c, h, w);
          const double a = reference::load_element(t, at), b = reference::load_element(cpu.tensor(), at);
          const double levels = std::abs(a - b) * norm.std[c] * 255;
          sum += levels;
          d.max = std::max(d.max, levels);
        }
  d.mean = sum / double(t.numel());
  return d;
}

TEST_F(GpuImagePipelineTest, SamplesLabelsAndPixelsMatchTheCpuPathInEveryDtypeAndLayout) {
  TempDir dir;
  // 4:2:0 and 4:4:4 colour photos of ImageNet-like sizes, both orientations, a progressive one, a gray one.
  const int sizes[][2] = {{500, 375}, {375, 500}, {320, 240}, {500, 333}, {256, 256}, {400, 300}};
  for (int i = 0; i < 18; ++i) {
    const std::string cls = "c" + std::to_string(i % 3);
    fs::create_directories(dir.path() / cls);
    JpegEncodeOptions options;
    options.subsample_chroma = i % 4 != 1;
    options.progressive = i == 7;
    const int channels = i == 11 ? 1 : 3;
    write_file(dir.file(cls + "/" + std::to_string(100 + i) + ".jpg"),
               jpeg(sizes[i % 6][0], sizes[i % 6][1], channels, 40 + i, options));
  }
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  const int64_t batch = 8, batches = 4;
  for (const bool train : {true, false}) {
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (const Layout layout : {Layout::nhwc, Layout::nchw}) {
        SCOPED_TRACE(std::string(train ? "train " : "eval ") + dtype_name(dtype) +
                     (layout == Layout::nhwc ? " nhwc" : " nchw"));
        ImageDatasetOptions options;
        options.image_size = 224;
        options.train = train;
        options.threads = 2;
        options.seed = 11;
        ImageDataset cpu_data(source, options);
        ImageDataset gpu_data(source, options);
        auto gpu = pipeline(gpu_data, batch, batches, dtype, layout);
        const SampleShape shape = cpu_data.sample_shape();
        const std::vector<int64_t> dims = {batch, shape.channels, shape.height, shape.width};
        testing::DeviceBuffer images(static_cast<size_t>(batch * shape.numel()) * dtype_size(dtype));
        testing::DeviceBuffer labels(static_cast<size_t>(batch) * 4);
        Tensor device_images(images.get(), dims, dtype, layout, Device{DeviceKind::cuda, 0});
        Tensor device_labels(labels.get(), {batch}, DType::i32, Layout::nchw, Device{DeviceKind::cuda, 0});
        HostBuffer got(dims, dtype, layout), expected(dims, dtype, layout),
            expected_labels({batch}, DType::i32);
        Difference worst_path, worst_full;
        double mean_path = 0, mean_full = 0;
        for (int64_t n = 0; n < batches; ++n) {
          const std::span<const int32_t> host_labels = gpu->next(device_images, device_labels, stream_);
          sync();
          DLB_KERNEL_CHECK(
              cudaMemcpy(got.tensor().data(), images.get(), got.tensor().bytes(), cudaMemcpyDeviceToHost));
          std::vector<int32_t> copied(static_cast<size_t>(batch));
          DLB_KERNEL_CHECK(
              cudaMemcpy(copied.data(), labels.get(), copied.size() * 4, cudaMemcpyDeviceToHost));
          const std::vector<int64_t> indices = indices_of(n, batch, source->size());
          cpu_data.gather(indices, expected.tensor(), expected_labels.tensor());
          for (int64_t k = 0; k < batch; ++k) {
            EXPECT_EQ(copied[size_t(k)], expected_labels.ptr<int32_t>()[k]);
            EXPECT_EQ(host_labels[size_t(k)], expected_labels.ptr<int32_t>()[k]);
          }
          const Difference path = compare_batches(got, expected, options.normalization);
          // The same boxes on libjpeg-turbo's full-size decode: what differs is the decoders' output only.
          HostBuffer full(dims, dtype, layout);
          for (int64_t k = 0; k < batch; ++k) {
            std::vector<uint8_t> bytes;
            std::string error;
            JpegInfo info;
            ASSERT_TRUE(source->read(indices[size_t(k)], bytes, error) && read_jpeg_info(bytes, info, error));
            const SampleCrop crop = choose_sample_crop(options, info.width, info.height,
                                                       sample_draw(static_cast<uint64_t>(n), k, 0));
            RgbImage decoded;
            ASSERT_TRUE(decode_jpeg(bytes, 8, 3, decoded, error)) << error;
            crop_resize_normalize(decoded, 8, crop.box, 224, 224, crop.flip, options.normalization, dtype,
                                  layout,
                                  static_cast<std::byte*>(full.tensor().data()) +
                                      k * shape.numel() * int64_t(dtype_size(dtype)));
          }
          const Difference same_box = compare_batches(got, full, options.normalization);
          if (same_box.max > 112) {  // which sample: for the report
            for (int64_t k = 0; k < batch; ++k) {
              HostBuffer one_got({1, shape.channels, shape.height, shape.width}, dtype, layout);
              HostBuffer one_full({1, shape.channels, shape.height, shape.width}, dtype, layout);
              const size_t bytes = one_got.tensor().bytes();
              std::memcpy(one_got.tensor().data(), static_cast<std::byte*>(got.tensor().data()) + k * bytes,
                          bytes);
              std::memcpy(one_full.tensor().data(), static_cast<std::byte*>(full.tensor().data()) + k * bytes,
                          bytes);
              const Difference d = compare_batches(one_got, one_full, options.normalization);
              if (d.max > 112)
                std::printf("    batch %lld sample %lld (%s): mean |d| %.2f max %.0f\n", (long long)n,
                            (long long)k, source->where(indices[size_t(k)]).c_str(), d.mean, d.max);
            }
          }
          mean_path += path.mean / batches;
          mean_full += same_box.mean / batches;
          worst_path.max = std::max(worst_path.max, path.max);
          worst_full.max = std::max(worst_full.max, same_box.max);
        }
        std::printf(
            "  %-5s %-4s %s: vs the CPU path mean |d| %.2f max %.0f levels; vs libjpeg-turbo at full "
            "size, same boxes: mean %.2f max %.0f\n",
            train ? "train" : "eval", dtype_name(dtype), layout == Layout::nhwc ? "nhwc" : "nchw", mean_path,
            worst_path.max, mean_full, worst_full.max);
        // The decoders' IDCT and chroma upsampling (as JpegBatchDecoder's test bounds them), plus the dtype's
        // rounding (bf16: 2^-9 relative, up to ~1 level near the normalised range's ends).
        const double rounding = dtype == DType::bf16 ? 0.6 : dtype == DType::f16 ? 0.1 : 0.0;
        EXPECT_LT(mean_full, 1.5 + rounding);
        EXPECT_LE(worst_full.max, 112 + 2 * rounding);
        // The CPU path decodes DCT-scaled where the box allows: its resampling differs a little more.
        EXPECT_LT(mean_path, 3.0 + rounding);
        const GpuPipelineStats stats = gpu->stats();
        EXPECT_EQ(stats.decoded_on_hardware + stats.decoded_on_gpu_cuda + stats.decoded_on_cpu,
                  batch * batches);
        EXPECT_EQ(stats.decoded_on_cpu, 0);
        EXPECT_EQ(stats.skipped, 0);
        EXPECT_EQ(cpu_data.stats().bad_files, 0);
      }
    }
  }
}

// A colour file cannot go to a 1-channel network from nvJPEG's RGB: libjpeg-turbo takes its luminance; a
// gray file goes through nvJPEG. Both equal the CPU path's output (bit for bit for the gray one on the
// JPEG engines, which decode 4:4:4 and gray exactly as libjpeg-turbo does).
TEST_F(GpuImagePipelineTest, AGrayNetworkTakesGrayFilesFromTheGpuAndColourOnesFromTheCpu) {
  TempDir dir;
  fs::create_directories(dir.path() / "a");
  write_file(dir.file("a/0.jpg"), jpeg(28, 28, 1, 1));
  write_file(dir.file("a/1.jpg"), jpeg(28, 28, 3, 2));
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  ImageDatasetOptions options = default_image_options(*source);
  ASSERT_EQ(options.channels, 1);
  options.image_size = 64;
  ImageDataset data(source, options);
  auto gpu = pipeline(data, 2, 1, DType::f32, Layout::nchw);
  testing::DeviceBuffer images(2 * 64 * 64 * 4), labels(8);
  Tensor device_images(images.get(), {2, 1, 64, 64}, DType::f32, Layout::nchw, Device{DeviceKind::cuda, 0});
  Tensor device_labels(labels.get(), {2}, DType::i32, Layout::nchw, Device{DeviceKind::cuda, 0});
  gpu->next(device_images, device_labels, stream_);
  sync();
  HostBuffer got({2, 1, 64, 64}, DType::f32), expected({2, 1, 64, 64}, DType::f32),
      expected_labels({2}, DType::i32);
  DLB_KERNEL_CHECK(
      cudaMemcpy(got.tensor().data(), images.get(), got.tensor().bytes(), cudaMemcpyDeviceToHost));
  const std::vector<int64_t> indices = {0, 1};
  ImageDataset(source, options).gather(indices, expected.tensor(), expected_labels.tensor());
  const Difference d = compare_batches(got, expected, options.normalization);
  std::printf("  gray network: mean |d| %.3f max %.1f levels\n", d.mean, d.max);
  EXPECT_LT(d.max, 1.0);
  EXPECT_EQ(gpu->stats().decoded_on_cpu, 1);
  EXPECT_EQ(gpu->stats().decoded_on_hardware + gpu->stats().decoded_on_gpu_cuda, 1);
}

// The CPU path's bad files: each decodes, falls back to libjpeg-turbo, or is skipped (replaced by the next
// sample) and counted; --strict stops at the first with its path.
TEST_F(GpuImagePipelineTest, EveryBadFileDecodesFallsBackOrIsSkippedAndStrictNamesIt) {
  TempDir dir;
  fs::create_directories(dir.path() / "a");
  const std::string good = jpeg(200, 150, 3, 3);
  std::string corrupt = good;  // 16 inverted bytes in the middle of the scan
  for (size_t i = corrupt.size() / 2; i < corrupt.size() / 2 + 16; ++i) corrupt[i] = char(~corrupt[i]);
  std::string huge = jpeg(16, 16, 3, 4);  // a 60000x60000 frame header on a 16x16 file
  const size_t sof = huge.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  huge[sof + 5] = huge[sof + 7] = char(60000 >> 8);
  huge[sof + 6] = huge[sof + 8] = char(60000 & 0xff);
  const std::vector<uint8_t> cmyk_pixels = photo_like(64, 48, 4, 5);
  const std::vector<uint8_t> cmyk_bytes = encode_jpeg(cmyk_pixels.data(), 64, 48, 4, 90);
  JpegEncodeOptions progressive;
  progressive.progressive = true;
  const std::vector<std::pair<std::string, std::string> > files = {
      {"00-good", good},
      {"01-zero-bytes", ""},
      {"02-png", std::string("\x89PNG\r\n\x1a\n", 8) + std::string(64, 'x')},
      {"03-truncated", good.substr(0, good.size() / 2)},
      {"04-corrupt-scan", corrupt},
      {"05-huge", huge},
      {"06-cmyk", std::string(cmyk_bytes.begin(), cmyk_bytes.end())},
      {"07-gray", jpeg(120, 90, 1, 6)},
      {"08-progressive", jpeg(200, 150, 3, 7, progressive)},
      {"09-good", jpeg(150, 200, 3, 8)},
  };
  for (const auto& [name, bytes] : files) write_file(dir.file("a/" + name + ".jpg"), bytes);
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  ImageDatasetOptions options;
  options.image_size = 64;
  options.threads = 2;
  ImageDataset data(source, options);
  const int64_t batch = 10;
  auto gpu = pipeline(data, batch, 3, DType::f16, Layout::nhwc);
  testing::DeviceBuffer images(size_t(batch) * 3 * 64 * 64 * 2), labels(size_t(batch) * 4);
  Tensor device_images(images.get(), {batch, 3, 64, 64}, DType::f16, Layout::nhwc,
                       Device{DeviceKind::cuda, 0});
  Tensor device_labels(labels.get(), {batch}, DType::i32, Layout::nchw, Device{DeviceKind::cuda, 0});
  for (int n = 0; n < 3; ++n) gpu->next(device_images, device_labels, stream_);
  sync();
  const GpuPipelineStats stats = gpu->stats();
  std::printf(
      "  3 batches of the 10 files: %lld on the engines, %lld by the CUDA backend, %lld on the CPU, %lld "
      "skipped (%lld distinct bad files)\n",
      (long long)stats.decoded_on_hardware, (long long)stats.decoded_on_gpu_cuda,
      (long long)stats.decoded_on_cpu, (long long)stats.skipped, (long long)data.stats().bad_files);
  // Zero bytes, PNG, truncated and the huge header are bad on both paths; the corrupt scan is caught by
  // libjpeg-turbo when nvJPEG refuses it, and may decode on the JPEG engines (which do not report it).
  EXPECT_GE(data.stats().bad_files, 4);
  EXPECT_LE(data.stats().bad_files, 5);
  EXPECT_EQ(stats.decoded_on_hardware + stats.decoded_on_gpu_cuda + stats.decoded_on_cpu, 3 * batch);
  EXPECT_GE(stats.decoded_on_cpu, 3);  // the CMYK file, in each batch
  // Each draw of a bad file counts, replacements that are bad too included, as on the CPU path: the same
  // three batches there skip as many where both paths found the same bad files.
  ImageDataset cpu_data(source, options);
  HostBuffer cpu_images({batch, 3, 64, 64}, DType::f16, Layout::nhwc), cpu_labels({batch}, DType::i32);
  for (int64_t n = 0; n < 3; ++n)
    cpu_data.gather(indices_of(n, batch, source->size()), cpu_images.tensor(), cpu_labels.tensor());
  std::printf("  the CPU path: %lld skipped (%lld distinct bad files)\n", (long long)cpu_data.stats().skipped,
              (long long)cpu_data.stats().bad_files);
  if (cpu_data.stats().bad_files == data.stats().bad_files) {
    EXPECT_EQ(stats.skipped, cpu_data.stats().skipped);
  }
  EXPECT_GE(stats.skipped, 3 * data.stats().bad_files);

  ImageDatasetOptions strict = options;
  strict.strict = true;
  strict.threads = 1;  // the first bad file in order is the one named
  ImageDataset strict_data(source, strict);
  auto strict_gpu = pipeline(strict_data, batch, 1, DType::f16, Layout::nhwc);
  const std::string message =
      testing::user_error_message([&] { strict_gpu->next(device_images, device_labels, stream_); });
  EXPECT_NE(message.find("01-zero-bytes.jpg"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// 1,000 batches (small images, so that the test stays short): device memory after them is what it was
// after the first ten, and the pipeline's counts add up.
TEST_F(GpuImagePipelineTest, NoDeviceMemoryGrowsOverAThousandBatches) {
  TempDir dir;
  fs::create_directories(dir.path() / "a");
  for (int i = 0; i < 40; ++i)
    write_file(dir.file("a/" + std::to_string(i) + ".jpg"),
               jpeg(96 + 8 * (i % 5), 72 + 8 * (i % 3), 3, 50 + i));
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  ImageDatasetOptions options;
  options.image_size = 64;
  options.threads = 2;
  ImageDataset data(source, options);
  const int64_t batch = 32, count = 1000;
  auto gpu = pipeline(data, batch, count, DType::bf16, Layout::nhwc);
  testing::DeviceBuffer images(size_t(batch) * 3 * 64 * 64 * 2), labels(size_t(batch) * 4);
  Tensor device_images(images.get(), {batch, 3, 64, 64}, DType::bf16, Layout::nhwc,
                       Device{DeviceKind::cuda, 0});
  Tensor device_labels(labels.get(), {batch}, DType::i32, Layout::nchw, Device{DeviceKind::cuda, 0});
  size_t free_after_ten = 0, total = 0;
  for (int64_t n = 0; n < count; ++n) {
    gpu->next(device_images, device_labels, stream_);
    if (n == 9) {
      sync();
      DLB_KERNEL_CHECK(cudaMemGetInfo(&free_after_ten, &total));
    }
  }
  sync();
  size_t free_at_end = 0;
  DLB_KERNEL_CHECK(cudaMemGetInfo(&free_at_end, &total));
  std::printf("  device memory free after 10 batches %.1f MiB, after 1000 %.1f MiB\n",
              free_after_ten / 1048576.0, free_at_end / 1048576.0);
  EXPECT_GE(free_at_end + (size_t(2) << 20), free_after_ten);
  const GpuPipelineStats stats = gpu->stats();
  EXPECT_EQ(stats.decoded_on_hardware + stats.decoded_on_gpu_cuda + stats.decoded_on_cpu, batch * count);
  EXPECT_EQ(stats.skipped, 0);
}

}  // namespace
}  // namespace dlbench

#endif  // DLBENCH_WITH_CUDA
