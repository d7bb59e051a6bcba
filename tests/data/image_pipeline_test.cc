// The image pipeline around the decoder: the image folder's listing, ImageDataset's batches (the same
// whatever the thread count, in every dtype and layout, bad files skipped or stopping under --strict), the
// same pixels from an image folder and from its shards, and the prefetcher's order and errors.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/reference/half_float.h"
#include "core/status.h"
#include "core/tensor.h"
#include "data/batch_prefetcher.h"
#include "data/image_dataset.h"
#include "data/image_source.h"
#include "data/jpeg_image.h"
#include "data/shard.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::user_error_message;
using testing::write_file;

// A smooth RGB picture whose colour depends on `seed`, as JPEG bytes.
std::string picture(int width, int height, int seed, int channels = 3) {
  std::vector<uint8_t> pixels(static_cast<size_t>(width * height * channels));
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c)
        pixels[static_cast<size_t>((y * width + x) * channels + c)] =
            static_cast<uint8_t>((x * 255 / width + y * 128 / height + seed * 37 + c * 60) % 256);
  std::vector<uint8_t> jpeg = encode_jpeg(pixels.data(), width, height, channels, 92);
  return std::string(jpeg.begin(), jpeg.end());
}

// ROOT/<class>/<n>.jpg: `per_class` pictures in each of `classes` classes.
void make_folder(const fs::path& root, int classes, int per_class, int width = 96, int height = 72) {
  for (int c = 0; c < classes; ++c) {
    fs::create_directories(root / ("class" + std::to_string(c)));
    for (int i = 0; i < per_class; ++i)
      write_file((root / ("class" + std::to_string(c)) / (std::to_string(i) + ".jpg")).string(),
                 picture(width, height, c * 100 + i));
  }
}

struct Batch {
  HostBuffer images, labels;
  Batch(int64_t n, const SampleShape& s, DType dtype, Layout layout)
      : images({n, s.channels, s.height, s.width}, dtype, layout), labels({n}, DType::i32) {}
  std::vector<uint8_t> bytes() const {
    const auto* p = static_cast<const uint8_t*>(images.tensor().data());
    return std::vector<uint8_t>(p, p + images.tensor().bytes());
  }
};

ImageDatasetOptions small_options(int threads) {
  ImageDatasetOptions o;
  o.image_size = 32;
  o.threads = threads;
  o.seed = 7;
  return o;
}

TEST(ImageFolder, ClassesSortedFilesSorted) {
  TempDir dir;
  make_folder(dir.path(), 2, 2);
  write_file(dir.file("class1/readme.txt"), "not an image");
  write_file(dir.file("class1/UPPER.JPEG"), picture(40, 30, 1));
  const ImageFolderListing listing = list_image_folder(dir.path().string());
  ASSERT_EQ(listing.class_names, (std::vector<std::string>{"class0", "class1"}));
  ASSERT_EQ(listing.paths.size(), 5u);  // the .txt is not an image
  EXPECT_EQ(listing.labels, (std::vector<int32_t>{0, 0, 1, 1, 1}));
  EXPECT_TRUE(std::is_sorted(listing.paths.begin(), listing.paths.end()));
  EXPECT_TRUE(is_image_folder(dir.path().string()));
  EXPECT_FALSE(is_image_folder(dir.file("class0")));
}

TEST(ImageFolder, AnEmptyClassFolderIsRefusedByName) {
  TempDir dir;
  make_folder(dir.path(), 2, 2);
  fs::create_directories(dir.path() / "a_empty");
  fs::create_directories(dir.path() / "b_text_only");
  write_file(dir.file("b_text_only/readme.txt"), "not an image");
  const std::string message = user_error_message([&] { list_image_folder(dir.path().string()); });
  EXPECT_NE(message.find("a_empty"), std::string::npos) << message;  // the first one
  EXPECT_NE(message.find("shifts the labels"), std::string::npos) << message;
  EXPECT_THROW(open_image_folder(dir.path().string()), UserError);
}

TEST(ImageFolder, NoImagesOrNoDirectoryIsOneClearError) {
  TempDir dir;
  fs::create_directories(dir.path() / "empty_class");
  EXPECT_NE(user_error_message([&] { list_image_folder(dir.path().string()); }).find("no images"),
            std::string::npos);
  EXPECT_NE(user_error_message([&] { list_image_folder(dir.file("missing")); }).find("not a directory"),
            std::string::npos);
}

TEST(ImageDataset, SameBatchWhateverTheThreadCountAndNewDrawsEachCall) {
  TempDir dir;
  make_folder(dir.path(), 3, 4);
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  std::vector<int64_t> indices = {0, 5, 11, 3, 3, 7};
  std::vector<std::vector<uint8_t>> first_calls;
  for (int threads : {1, 4}) {
    ImageDataset data(source, small_options(threads));
    Batch a(6, data.sample_shape(), DType::f32, Layout::nhwc),
        b(6, data.sample_shape(), DType::f32, Layout::nhwc);
    data.gather(indices, a.images.tensor(), a.labels.tensor());
    data.gather(indices, b.images.tensor(), b.labels.tensor());
    EXPECT_NE(a.bytes(), b.bytes()) << "the second call draws new crops";
    first_calls.push_back(a.bytes());
    const int32_t* labels = a.labels.ptr<int32_t>();
    for (size_t k = 0; k < indices.size(); ++k) EXPECT_EQ(labels[k], source->label(indices[k]));
  }
  EXPECT_EQ(first_calls[0], first_calls[1]) << "1 and 4 threads give different batches";
}

TEST(ImageDataset, HalfAndBfloatOutputsAreTheRoundedFloatOutput) {
  TempDir dir;
  make_folder(dir.path(), 2, 2);
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  std::vector<int64_t> indices = {0, 1, 2, 3};
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    ImageDataset wide(source, small_options(2)), half(source, small_options(2)),
        brain(source, small_options(2));
    Batch f(4, wide.sample_shape(), DType::f32, layout), h(4, wide.sample_shape(), DType::f16, layout),
        b(4, wide.sample_shape(), DType::bf16, layout);
    wide.gather(indices, f.images.tensor(), f.labels.tensor());
    half.gather(indices, h.images.tensor(), h.labels.tensor());
    brain.gather(indices, b.images.tensor(), b.labels.tensor());
    const float* fp = f.images.ptr<float>();
    const auto* hp = h.images.ptr<uint16_t>();
    const auto* bp = b.images.ptr<uint16_t>();
    double worst_h = 0, worst_b = 0;
    for (int64_t i = 0; i < f.images.tensor().numel(); ++i) {
      worst_h = std::max(worst_h, std::abs(f16_to_double(hp[i]) - fp[i]) / (std::abs(fp[i]) + 1e-3));
      worst_b = std::max(worst_b, std::abs(bf16_to_double(bp[i]) - fp[i]) / (std::abs(fp[i]) + 1e-3));
    }
    EXPECT_LT(worst_h, 1e-3);  // half has 11 significant bits: 2^-11 relative
    EXPECT_LT(worst_b, 8e-3);  // bfloat16 has 8: 2^-8
  }
}

TEST(ImageDataset, BadFilesAreSkippedNamedAndCountedOrStopTheRunUnderStrict) {
  TempDir dir;
  make_folder(dir.path(), 2, 3);
  write_file(dir.file("class0/1.jpg"), "");  // zero bytes
  write_file(dir.file("class1/0.jpg"), std::string("\x89PNG\r\n\x1a\n", 8) + std::string(64, 'x'));  // a PNG
  const std::string good = picture(96, 72, 5);
  write_file(dir.file("class1/2.jpg"), good.substr(0, good.size() / 2));  // truncated
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  ImageDataset data(source, small_options(3));
  std::vector<int64_t> all = {0, 1, 2, 3, 4, 5};
  Batch batch(6, data.sample_shape(), DType::f32, Layout::nchw);
  data.gather(all, batch.images.tensor(), batch.labels.tensor());
  EXPECT_EQ(data.stats().bad_files, 3);
  EXPECT_EQ(data.stats().decoded, 6);  // every slot was filled by a good image
  for (int64_t i = 0; i < batch.images.tensor().numel(); ++i)
    ASSERT_TRUE(std::isfinite(batch.images.ptr<float>()[i]));

  ImageDatasetOptions strict = small_options(2);
  strict.strict = true;
  ImageDataset strict_data(source, strict);
  std::vector<int64_t> bad = {3};  // class1/0.jpg, the PNG
  Batch one(1, strict_data.sample_shape(), DType::f32, Layout::nchw);
  const std::string message =
      user_error_message([&] { strict_data.gather(bad, one.images.tensor(), one.labels.tensor()); });
  EXPECT_NE(message.find("class1/0.jpg"), std::string::npos) << message;
  EXPECT_NE(message.find("PNG"), std::string::npos) << message;
}

// The crop code both pipelines take their boxes from (choose_sample_crop with sample_draw) is gather()'s,
// draw for draw: each sample of two consecutive batches, rebuilt from its file by hand with the crop the
// GPU pipeline would choose for it (batch n is call n), equals gather()'s bit for bit; a bad file's
// replacement (the next sample, attempt 1) too. Photos of several sizes and both orientations, training
// and evaluation transforms.
TEST(ImageDataset, TheSharedCropCodeIsGathersDrawForDraw) {
  TempDir dir;
  fs::create_directories(dir.path() / "a");
  fs::create_directories(dir.path() / "b");
  const int sizes[][2] = {{500, 375}, {375, 500}, {96, 72}, {640, 480}, {300, 300}, {120, 400}};
  for (int i = 0; i < 6; ++i)
    write_file(dir.file((i % 2 ? "b/" : "a/") + std::to_string(i) + ".jpg"),
               picture(sizes[i][0], sizes[i][1], i));
  write_file(dir.file("a/6.jpg"), "not a jpeg");  // sorted after a/0, a/2, a/4: sample 3 of the listing
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  ASSERT_EQ(source->size(), 7);
  for (const bool train : {true, false}) {
    ImageDatasetOptions options = small_options(2);
    options.image_size = 64;
    options.train = train;
    ImageDataset data(source, options);
    const SampleShape shape = data.sample_shape();
    const std::vector<int64_t> indices = {0, 1, 2, 3, 4, 5, 6};
    for (uint64_t call = 0; call < 2; ++call) {
      Batch batch(7, shape, DType::f32, Layout::nhwc);
      data.gather(indices, batch.images.tensor(), batch.labels.tensor());
      int replaced = 0;
      for (int64_t k = 0; k < 7; ++k) {
        int64_t index = indices[static_cast<size_t>(k)];
        uint64_t attempt = 0;
        std::vector<uint8_t> bytes;
        std::string error;
        JpegInfo info;
        while (!source->read(index, bytes, error) || !read_jpeg_info(bytes, info, error)) {
          index = (index + 1) % source->size();  // as both pipelines replace a bad file
          ++attempt;
          ++replaced;
        }
        const SampleCrop crop =
            choose_sample_crop(options, info.width, info.height, sample_draw(call, k, attempt));
        RgbImage image;
        ASSERT_TRUE(decode_jpeg(bytes, crop.scale_eighths, 3, image, error)) << error;
        std::vector<float> expected(static_cast<size_t>(shape.numel()));
        crop_resize_normalize(image, crop.scale_eighths, crop.box, 64, 64, crop.flip, options.normalization,
                              DType::f32, Layout::nhwc, expected.data());
        const float* got = batch.images.ptr<float>() + k * shape.numel();
        ASSERT_EQ(std::memcmp(got, expected.data(), expected.size() * sizeof(float)), 0)
            << "sample " << k << " of call " << call << (train ? " (training)" : " (evaluation)");
        EXPECT_EQ(batch.labels.ptr<int32_t>()[k], source->label(index));
      }
      EXPECT_EQ(replaced, 1);
    }
  }
  // The draws differ from one batch to the next and from one sample to the next (so the boxes do).
  ImageDatasetOptions options = small_options(1);
  EXPECT_NE(choose_sample_crop(options, 500, 375, sample_draw(0, 0, 0)).box.x +
                choose_sample_crop(options, 500, 375, sample_draw(0, 0, 0)).box.width,
            choose_sample_crop(options, 500, 375, sample_draw(1, 0, 0)).box.x +
                choose_sample_crop(options, 500, 375, sample_draw(1, 0, 0)).box.width);
  EXPECT_EQ(sample_draw(1, 2, 3), (uint64_t{1} << 24) + 2 + (uint64_t{3} << 48));
}

TEST(ImageDataset, FlatImagesNormaliseToTheirKnownValues) {
  // Each image one flat colour: every output pixel is (v / 255 - mean) / std of its channel, within JPEG's
  // error on flat content (2 levels) — the per-sample statistics of the output are known exactly.
  TempDir dir;
  const int levels[4][3] = {{0, 0, 0}, {255, 255, 255}, {200, 30, 90}, {60, 160, 120}};
  for (int i = 0; i < 4; ++i) {
    fs::create_directories(dir.path() / ("c" + std::to_string(i)));
    std::vector<uint8_t> pixels(80 * 60 * 3);
    for (size_t p = 0; p < pixels.size(); ++p) pixels[p] = static_cast<uint8_t>(levels[i][p % 3]);
    std::vector<uint8_t> jpeg = encode_jpeg(pixels.data(), 80, 60, 3, 100);
    write_file((dir.path() / ("c" + std::to_string(i)) / "a.jpg").string(),
               std::string(jpeg.begin(), jpeg.end()));
  }
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  ImageDataset data(source, small_options(2));
  std::vector<int64_t> indices = {0, 1, 2, 3};
  Batch batch(4, data.sample_shape(), DType::f32, Layout::nchw);
  data.gather(indices, batch.images.tensor(), batch.labels.tensor());
  const Normalization& n = kImageNetNormalization;
  const int64_t plane = 32 * 32;
  for (int i = 0; i < 4; ++i) {
    for (int c = 0; c < 3; ++c) {
      const float* values = batch.images.ptr<float>() + (i * 3 + c) * plane;
      double sum = 0, lo = 1e9, hi = -1e9;
      for (int64_t p = 0; p < plane; ++p) {
        sum += values[p];
        lo = std::min<double>(lo, values[p]);
        hi = std::max<double>(hi, values[p]);
      }
      const double expected = (levels[i][c] / 255.0 - n.mean[c]) / n.std[c];
      const double tolerance = 2.0 / 255.0 / n.std[c];
      EXPECT_NEAR(sum / plane, expected, tolerance) << "image " << i << " channel " << c;
      EXPECT_NEAR(lo, expected, tolerance);
      EXPECT_NEAR(hi, expected, tolerance);
    }
  }
}

TEST(ImageDataset, AFileThatDisappearedIsSkippedLikeACorruptOne) {
  TempDir dir;
  make_folder(dir.path(), 2, 2);
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  fs::remove(dir.path() / "class0" / "1.jpg");  // listed, then gone: the read fails
  ImageDataset data(source, small_options(1));
  std::vector<int64_t> indices = {1};
  Batch batch(1, data.sample_shape(), DType::f32, Layout::nchw);
  data.gather(indices, batch.images.tensor(), batch.labels.tensor());
  EXPECT_EQ(data.stats().bad_files, 1);
  EXPECT_EQ(batch.labels.ptr<int32_t>()[0], source->label(2));  // the next sample took its place
}

TEST(ImageDataset, TheFolderAndItsShardsGiveTheSameBatches) {
  TempDir dir;
  make_folder(dir.path() / "images", 3, 5);
  const ImageFolderListing listing = list_image_folder((dir.path() / "images").string());
  std::vector<ShardInput> files;
  for (size_t i = 0; i < listing.paths.size(); ++i)
    files.push_back({listing.paths[i], listing.paths[i], listing.labels[i]});
  pack_shards(files, listing.class_names, dir.file("shards"), 20000, /*strict=*/true);
  ASSERT_TRUE(is_shard_set(dir.file("shards")));
  auto folder = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.file("images")));
  auto shards = std::shared_ptr<const EncodedImageSource>(open_shard_set(dir.file("shards")));
  ASSERT_EQ(folder->size(), shards->size());
  EXPECT_EQ(folder->class_names(), shards->class_names());
  ImageDataset a(folder, small_options(2)), b(shards, small_options(3));
  std::vector<int64_t> indices = {14, 0, 7, 7, 2};
  Batch x(5, a.sample_shape(), DType::f16, Layout::nhwc), y(5, b.sample_shape(), DType::f16, Layout::nhwc);
  a.gather(indices, x.images.tensor(), x.labels.tensor());
  b.gather(indices, y.images.tensor(), y.labels.tensor());
  EXPECT_EQ(x.bytes(), y.bytes());
  EXPECT_EQ(0, std::memcmp(x.labels.ptr<int32_t>(), y.labels.ptr<int32_t>(), 5 * sizeof(int32_t)));
}

TEST(ImageDataset, SmallGrayscaleImagesKeepTheirSizeAndOneChannel) {
  TempDir dir;
  for (int c = 0; c < 2; ++c) {
    fs::create_directories(dir.path() / std::to_string(c));
    write_file((dir.path() / std::to_string(c) / "a.jpg").string(), picture(28, 28, c, 1));
  }
  auto source = std::shared_ptr<const EncodedImageSource>(open_image_folder(dir.path().string()));
  ImageDatasetOptions options = default_image_options(*source);
  EXPECT_EQ(options.channels, 1);
  EXPECT_EQ(options.image_size, 28);
  EXPECT_FALSE(options.augment);
}

// A dataset that records which batches it was asked for and can fail on one.
class RecordingDataset final : public Dataset {
 public:
  std::string name() const override { return "recording"; }
  int64_t size() const override { return 1000; }
  SampleShape sample_shape() const override { return {1, 2, 2}; }
  int num_classes() const override { return 10; }
  void gather(std::span<const int64_t> indices, Tensor& images, Tensor& labels) const override {
    if (indices[0] == fail_at) throw_user_error("bad batch starting at {}", fail_at);
    for (size_t k = 0; k < indices.size(); ++k) {
      labels.ptr<int32_t>()[k] = static_cast<int32_t>(indices[k]);
      for (int p = 0; p < 4; ++p) images.ptr<float>()[k * 4 + p] = static_cast<float>(indices[k]);
    }
    ++calls;
  }
  int64_t fail_at = -1;
  mutable std::atomic<int> calls{0};
};

TEST(BatchPrefetcher, HandsOutEveryBatchInOrderAndRethrowsAFailure) {
  RecordingDataset data;
  data.fail_at = 60;
  auto plain = [](size_t bytes) { return ::operator new(bytes); };
  auto release = [](void* p) { ::operator delete(p); };
  BatchPrefetcher prefetcher(
      data, {3, 1, 2, 2}, DType::f32, Layout::nchw, 25,
      [](int64_t n) {
        return std::vector<int64_t>{3 * n, 3 * n + 1, 3 * n + 2};
      },
      3, plain, release);
  for (int64_t n = 0; n < 20; ++n) {
    const BatchPrefetcher::Batch& batch = prefetcher.next();
    for (int k = 0; k < 3; ++k) ASSERT_EQ(batch.labels.ptr<int32_t>()[k], 3 * n + k);
    ASSERT_EQ(batch.images.ptr<float>()[4 * 2], static_cast<float>(3 * n + 2));
  }
  // Batch 20 starts at sample 60: its failure reaches the caller of next(), with its message.
  EXPECT_NE(user_error_message([&] { prefetcher.next(); }).find("starting at 60"), std::string::npos);
}

}  // namespace
}  // namespace dlbench
