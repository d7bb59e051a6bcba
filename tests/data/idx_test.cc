#include "data/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::user_error_message;
using testing::write_file;

void put_be32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}

std::string idx_images(uint32_t count, uint32_t rows, uint32_t cols, uint32_t magic = 2051) {
  std::string out;
  put_be32(out, magic);
  put_be32(out, count);
  put_be32(out, rows);
  put_be32(out, cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i) out.push_back(static_cast<char>((i * 37) % 256));
  return out;
}

std::string idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 2049) {
  std::string out;
  put_be32(out, magic);
  put_be32(out, static_cast<uint32_t>(labels.size()));
  for (uint8_t label : labels) out.push_back(static_cast<char>(label));
  return out;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

IdxDataset::Spec small_spec() {
  IdxDataset::Spec spec;
  spec.name = "tiny";
  spec.rows = 2;
  spec.cols = 3;
  spec.num_classes = 10;
  spec.mean = 0.5f;
  spec.stddev = 0.25f;
  return spec;
}

class IdxFiles : public ::testing::Test {
 protected:
  // A valid pair: 4 images of 2x3 and their labels.
  void SetUp() override {
    write_file(images(), idx_images(4, 2, 3));
    write_file(labels(), idx_labels({0, 9, 3, 3}));
  }
  std::string images() const { return dir.file("images-idx3-ubyte"); }
  std::string labels() const { return dir.file("labels-idx1-ubyte"); }
  std::string load_error() const {
    return user_error_message([&] { IdxDataset::load(small_spec(), images(), labels()); });
  }
  TempDir dir;
};

void expect_round_trip(const IdxDataset& d) {
  EXPECT_EQ(d.name(), "tiny");
  ASSERT_EQ(d.size(), 4);
  EXPECT_EQ(d.sample_shape(), (SampleShape{1, 2, 3}));
  EXPECT_EQ(d.num_classes(), 10);
  EXPECT_EQ(d.label(0), 0);
  EXPECT_EQ(d.label(1), 9);
  EXPECT_EQ(d.label(3), 3);
  for (int64_t s = 0; s < 4; ++s)
    for (int64_t p = 0; p < 6; ++p) {
      const float raw = static_cast<float>(((s * 6 + p) * 37) % 256);
      EXPECT_FLOAT_EQ(d.image(s)[static_cast<size_t>(p)], (raw / 255.f - 0.5f) / 0.25f);
    }
  HostBuffer batch({2, 1, 2, 3}, DType::f32, Layout::nhwc), batch_labels({2}, DType::i32);
  const std::vector<int64_t> indices{3, 1};
  d.gather(indices, batch.tensor(), batch_labels.tensor());
  EXPECT_EQ(batch_labels.ptr<int32_t>()[0], 3);
  EXPECT_EQ(batch_labels.ptr<int32_t>()[1], 9);
  EXPECT_EQ(batch.ptr<float>()[batch.tensor().offset(0, 0, 1, 2)], d.image(3)[5]);
}

TEST_F(IdxFiles, RoundTripUncompressed) {
  expect_round_trip(IdxDataset::load(small_spec(), images(), labels()));
}

TEST_F(IdxFiles, RoundTripGzip) {
  write_gz(images() + ".gz", idx_images(4, 2, 3));
  write_gz(labels() + ".gz", idx_labels({0, 9, 3, 3}));
  expect_round_trip(IdxDataset::load(small_spec(), images() + ".gz", labels() + ".gz"));
  const IdxImages raw = read_idx_images(images() + ".gz");
  EXPECT_EQ(raw.count, 4);
  EXPECT_EQ(raw.rows, 2);
  EXPECT_EQ(raw.cols, 3);
  EXPECT_EQ(raw.pixels.size(), 24u);
}

TEST_F(IdxFiles, MissingFile) {
  const std::string missing = dir.file("nope-idx3-ubyte");
  const std::string message = user_error_message([&] { read_idx_images(missing); });
  EXPECT_CONTAINS(message, missing);
  EXPECT_CONTAINS(message, "not found");
}

TEST_F(IdxFiles, UnreadableFile) {
  // As root every file is readable, so the portable unreadable case is a directory in the file's place.
  std::filesystem::create_directory(dir.file("a-directory"));
  const std::string message = user_error_message([&] { read_idx_labels(dir.file("a-directory")); });
  EXPECT_CONTAINS(message, dir.file("a-directory"));
  EXPECT_CONTAINS(message, "is a directory");
}

TEST_F(IdxFiles, EmptyFileIsTruncated) {
  write_file(images(), "");
  const std::string message = load_error();
  EXPECT_CONTAINS(message, images());
  EXPECT_CONTAINS(message, "truncated");
}

TEST_F(IdxFiles, TruncatedHeader) {
  write_file(images(), idx_images(4, 2, 3).substr(0, 10));
  const std::string message = load_error();
  EXPECT_CONTAINS(message, images());
  EXPECT_CONTAINS(message, "truncated");
  EXPECT_CONTAINS(message, "header");
}

TEST_F(IdxFiles, TruncatedData) {
  write_file(labels(), idx_labels({0, 9, 3, 3}).substr(0, 10));
  const std::string message = load_error();
  EXPECT_CONTAINS(message, labels());
  EXPECT_CONTAINS(message, "truncated");
  EXPECT_CONTAINS(message, "4 labels");
}

TEST_F(IdxFiles, TruncatedGzip) {
  const std::string gz = images() + ".gz";
  std::string images_bytes = idx_images(1000, 2, 3);
  write_gz(gz, images_bytes);
  const std::string whole = read_file(gz);
  write_file(gz, whole.substr(0, whole.size() / 2));
  const std::string message = user_error_message([&] { read_idx_images(gz); });
  EXPECT_CONTAINS(message, gz);
  EXPECT_CONTAINS(message, "truncated");
}

TEST_F(IdxFiles, CorruptGzipChecksum) {
  const std::string gz = labels() + ".gz";
  write_gz(gz, idx_labels({0, 9, 3, 3}));
  std::string bytes = read_file(gz);
  bytes[bytes.size() - 8] ^= 0x5a;  // the gzip trailer's CRC-32 of the data
  write_file(gz, bytes);
  const std::string message = user_error_message([&] { read_idx_labels(gz); });
  EXPECT_CONTAINS(message, gz);
  EXPECT_CONTAINS(message, "corrupt gzip");
}

TEST_F(IdxFiles, CorruptGzipData) {
  // A gzip header followed by bytes that are not deflate data.
  std::string bytes("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10);
  bytes += std::string(64, '\xff');
  const std::string gz = images() + ".gz";
  write_file(gz, bytes);
  const std::string message = user_error_message([&] { read_idx_images(gz); });
  EXPECT_CONTAINS(message, gz);
  EXPECT_CONTAINS(message, "corrupt gzip");
}

TEST_F(IdxFiles, WrongMagicNamesExpectedAndFound) {
  const std::string message = user_error_message([&] { read_idx_images(labels()); });
  EXPECT_CONTAINS(message, labels());
  EXPECT_CONTAINS(message, "2049");
  EXPECT_CONTAINS(message, "expected 2051");
  EXPECT_CONTAINS(message, "label file");

  write_file(images(), idx_images(4, 2, 3, /*magic=*/0x12345678));
  const std::string other = load_error();
  EXPECT_CONTAINS(other, images());
  EXPECT_CONTAINS(other, std::to_string(0x12345678));
}

TEST_F(IdxFiles, CountMismatchNamesBothFiles) {
  write_file(labels(), idx_labels({0, 9, 3}));
  const std::string message = load_error();
  EXPECT_CONTAINS(message, images());
  EXPECT_CONTAINS(message, labels());
  EXPECT_CONTAINS(message, "4 images");
  EXPECT_CONTAINS(message, "3 labels");
}

TEST_F(IdxFiles, LabelOutOfRange) {
  write_file(labels(), idx_labels({0, 9, 10, 3}));
  const std::string message = load_error();
  EXPECT_CONTAINS(message, labels());
  EXPECT_CONTAINS(message, "label 10 of sample 2");
  EXPECT_CONTAINS(message, "0..9");
}

TEST_F(IdxFiles, WrongImageSize) {
  write_file(images(), idx_images(4, 3, 2));
  const std::string message = load_error();
  EXPECT_CONTAINS(message, images());
  EXPECT_CONTAINS(message, "3x2");
  EXPECT_CONTAINS(message, "2x3");
}

TEST_F(IdxFiles, NoImages) {
  write_file(images(), idx_images(0, 2, 3));
  write_file(labels(), idx_labels({}));
  EXPECT_CONTAINS(load_error(), "no images");
}

TEST_F(IdxFiles, TrailingData) {
  write_file(labels(), idx_labels({0, 9, 3, 3}) + "extra");
  const std::string message = load_error();
  EXPECT_CONTAINS(message, labels());
  EXPECT_CONTAINS(message, "beyond");
}

TEST_F(IdxFiles, HugeHeaderFailsFastWithoutAllocating) {
  std::string header;
  put_be32(header, 2051);
  put_be32(header, 0xffffffffu);
  put_be32(header, 0xffffffffu);
  put_be32(header, 0xffffffffu);
  write_file(images(), header);
  EXPECT_CONTAINS(load_error(), images());

  // Plausible-looking but enormous (a 4-terabyte promise): truncated after the few bytes that exist.
  header.resize(4);
  put_be32(header, 4000000);
  put_be32(header, 1000);
  put_be32(header, 1000);
  write_file(images(), header + "some bytes");
  EXPECT_CONTAINS(load_error(), "truncated");
}

// Garbage never crashes, hangs or escapes as anything but a UserError: flip random bytes of valid files.
TEST_F(IdxFiles, RandomCorruptionIsAlwaysAUserErrorOrALoad) {
  const std::string image_bytes = idx_images(4, 2, 3), label_bytes = idx_labels({0, 9, 3, 3});
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string a = image_bytes, b = label_bytes;
    std::string& victim = trial % 2 == 0 ? a : b;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) victim[rng() % victim.size()] = static_cast<char>(rng());
    if (trial % 3 == 0) victim.resize(rng() % (victim.size() + 1));
    if (trial % 4 == 1) {
      write_gz(images(), a);
      write_gz(labels(), b);
    } else {
      write_file(images(), a);
      write_file(labels(), b);
    }
    try {
      IdxDataset::load(small_spec(), images(), labels());
    } catch (const UserError&) {
    }
  }
  // And compressed files with random bytes flipped inside the deflate stream.
  write_gz(images(), idx_images(200, 2, 3));
  const std::string gz = read_file(images());
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes = gz;
    bytes[10 + rng() % (bytes.size() - 10)] ^= static_cast<char>(1 + rng() % 255);
    write_file(images(), bytes);
    try {
      read_idx_images(images());
    } catch (const UserError&) {
    }
  }
}

TEST(FashionMnist, MissingDirectoryTellsWhatToInstall) {
  TempDir empty;
  const std::string message =
      user_error_message([&] { load_fashion_mnist(empty.path().string(), Split::test); });
  EXPECT_CONTAINS(message, empty.file("t10k-images-idx3-ubyte.gz"));
  EXPECT_CONTAINS(message, "dataset-fashion-mnist");
  EXPECT_CONTAINS(message, "--data DIR");
}

TEST(FashionMnist, ReadsUncompressedCopies) {
  TempDir dir;
  std::string images;
  put_be32(images, 2051);
  put_be32(images, 2);
  put_be32(images, 28);
  put_be32(images, 28);
  images += std::string(2 * 28 * 28, '\x80');
  write_file(dir.file("t10k-images-idx3-ubyte"), images);
  write_file(dir.file("t10k-labels-idx1-ubyte"), idx_labels({1, 2}));
  const IdxDataset d = load_fashion_mnist(dir.path().string(), Split::test);
  EXPECT_EQ(d.name(), "fashion-mnist-test");
  EXPECT_EQ(d.size(), 2);
  EXPECT_FLOAT_EQ(d.image(1)[0], (128.f / 255.f - 0.2860f) / 0.3530f);
}

bool have_fashion_mnist() {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    if (!std::filesystem::exists(std::filesystem::path(kFashionMnistDir) / f)) return false;
  return true;
}

void expect_balanced_and_normalised(const IdxDataset& d, int64_t per_class) {
  EXPECT_EQ(d.sample_shape(), (SampleShape{1, 28, 28}));
  EXPECT_EQ(d.num_classes(), 10);
  std::vector<int64_t> histogram(10, 0);
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < d.size(); ++i) {
    ++histogram[static_cast<size_t>(d.label(i))];
    for (float v : d.image(i)) {
      sum += v;
      sum_sq += double{v} * v;
    }
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[static_cast<size_t>(c)], per_class) << "class " << c;
  const double n = static_cast<double>(d.size()) * 784;
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.01);  // the normalisation constants are the training set's statistics
  EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), 1.0, 0.01);
}

TEST(FashionMnist, RealTrainSplit) {
  if (!have_fashion_mnist())
    GTEST_SKIP() << "Fashion-MNIST not in " << kFashionMnistDir << " (package dataset-fashion-mnist)";
  const IdxDataset train = load_fashion_mnist(kFashionMnistDir, Split::train);
  EXPECT_EQ(train.name(), "fashion-mnist-train");
  ASSERT_EQ(train.size(), 60000);
  EXPECT_EQ(train.label(0), 9);  // the first training image is an ankle boot
  expect_balanced_and_normalised(train, 6000);
}

TEST(FashionMnist, RealTestSplit) {
  if (!have_fashion_mnist())
    GTEST_SKIP() << "Fashion-MNIST not in " << kFashionMnistDir << " (package dataset-fashion-mnist)";
  const IdxDataset test = load_fashion_mnist(kFashionMnistDir, Split::test);
  ASSERT_EQ(test.size(), 10000);
  std::vector<int64_t> histogram(10, 0);
  for (int64_t i = 0; i < test.size(); ++i) ++histogram[static_cast<size_t>(test.label(i))];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[static_cast<size_t>(c)], 1000) << "class " << c;
}

}  // namespace
}  // namespace dlbench
