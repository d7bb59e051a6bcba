#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zlib.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "core/status.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::temporaries_in;
using testing::user_error_message;
using testing::write_file;

std::vector<float> sequence(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(static_cast<float>(i) + 0.5f);
  return v;
}

Checkpoint sample_checkpoint() {
  Checkpoint c;
  c.model = "resnet20";
  c.config_digest = "classes=10 width=16 bn";
  c.settings = R"({"--batch-size":8,"--seed":42})";
  c.step = 123456789012;
  c.epoch = -3;  // any value round-trips; the trainer gives meaning
  c.loss_scale = 32768.f;
  c.parameters = sequence(1000, 1.f);
  c.parameters[7] = -0.f;
  c.parameters[8] = std::numeric_limits<float>::denorm_min();
  c.parameters[9] = std::numeric_limits<float>::infinity();
  c.momentum = sequence(1000, 0.01f);
  c.buffers = sequence(64, 2.f);
  return c;
}

void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << "element " << i;
}

TEST(Checkpoint, RoundTripIsExact) {
  TempDir dir;
  const std::string path = dir.file("run.ckpt");
  const Checkpoint saved = sample_checkpoint();
  save_checkpoint(path, saved);
  EXPECT_EQ(temporaries_in(dir.path()), 0);
  const Checkpoint loaded = load_checkpoint(path);
  EXPECT_EQ(loaded.model, saved.model);
  EXPECT_EQ(loaded.config_digest, saved.config_digest);
  EXPECT_EQ(loaded.settings, saved.settings);
  EXPECT_EQ(loaded.step, saved.step);
  EXPECT_EQ(loaded.epoch, saved.epoch);
  EXPECT_EQ(loaded.loss_scale, saved.loss_scale);
  expect_bitwise_equal(loaded.parameters, saved.parameters);
  expect_bitwise_equal(loaded.momentum, saved.momentum);
  expect_bitwise_equal(loaded.buffers, saved.buffers);
}

TEST(Checkpoint, EmptyFieldsRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("empty.ckpt");
  save_checkpoint(path, Checkpoint{});
  const Checkpoint loaded = load_checkpoint(path);
  EXPECT_EQ(loaded.model, "");
  EXPECT_EQ(loaded.loss_scale, 1.f);
  EXPECT_TRUE(loaded.parameters.empty() && loaded.momentum.empty() && loaded.buffers.empty());
}

// The layout documented in checkpoint.h, checked byte by byte on a small file.
TEST(Checkpoint, FileLayoutMatchesTheDocumentedFormat) {
  TempDir dir;
  const std::string path = dir.file("small.ckpt");
  Checkpoint c;
  c.model = "m";
  c.step = 2;
  c.parameters = {1.f};
  c.settings = "{}";
  save_checkpoint(path, c);
  const std::string bytes = read_file(path);
  // header, model, config_digest, settings, step, epoch, loss scale, three arrays, CRC
  const size_t expected_size = 20 + (8 + 1) + 8 + (8 + 2) + 8 + 8 + 4 + (8 + 4) + 8 + 8 + 4;
  ASSERT_EQ(bytes.size(), expected_size);
  EXPECT_EQ(bytes.substr(0, 8), std::string("DLBCKPT\0", 8));
  EXPECT_EQ(bytes.substr(8, 4), std::string("\x02\0\0\0", 4));
  EXPECT_EQ(static_cast<unsigned char>(bytes[12]), expected_size);
  EXPECT_EQ(bytes.substr(20, 9), std::string("\x01\0\0\0\0\0\0\0m", 9));
  EXPECT_EQ(bytes.substr(37, 10), std::string("\x02\0\0\0\0\0\0\0{}", 10));            // settings
  EXPECT_EQ(bytes.substr(47, 8), std::string("\x02\0\0\0\0\0\0\0", 8));                // step
  EXPECT_EQ(bytes.substr(63, 4), std::string("\0\0\x80\x3f", 4));                      // loss scale 1.0f
  EXPECT_EQ(bytes.substr(67, 12), std::string("\x01\0\0\0\0\0\0\0\0\0\x80\x3f", 12));  // parameters {1.0f}
}

TEST(Checkpoint, OverwritesAnExistingCheckpoint) {
  TempDir dir;
  const std::string path = dir.file("run.ckpt");
  Checkpoint c = sample_checkpoint();
  save_checkpoint(path, c);
  c.step = 7;
  c.parameters.resize(10);
  c.momentum.resize(10);
  save_checkpoint(path, c);
  const Checkpoint loaded = load_checkpoint(path);
  EXPECT_EQ(loaded.step, 7);
  EXPECT_EQ(loaded.parameters.size(), 10u);
}

class DamagedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    save_checkpoint(path(), sample_checkpoint());
    bytes = read_file(path());
  }
  std::string path() const { return dir.file("run.ckpt"); }
  std::string load_error(const std::string& contents) {
    write_file(path(), contents);
    return user_error_message([&] { load_checkpoint(path()); });
  }
  TempDir dir;
  std::string bytes;
};

TEST_F(DamagedCheckpoint, FlippedPayloadByteFailsTheChecksum) {
  for (size_t offset : {size_t{25}, size_t{60}, bytes.size() / 2, bytes.size() - 5}) {
    std::string damaged = bytes;
    damaged[offset] ^= 0x10;
    const std::string message = load_error(damaged);
    EXPECT_CONTAINS(message, path());
    EXPECT_CONTAINS(message, "checksum mismatch");
  }
  std::string bad_crc = bytes;
  bad_crc.back() ^= 0x01;
  EXPECT_CONTAINS(load_error(bad_crc), "checksum mismatch");
}

TEST_F(DamagedCheckpoint, Truncated) {
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{20}, size_t{10}, size_t{3}, size_t{0}}) {
    const std::string message = load_error(bytes.substr(0, keep));
    EXPECT_CONTAINS(message, path());
    EXPECT_CONTAINS(message, "truncated");
  }
}

TEST_F(DamagedCheckpoint, TrailingBytes) {
  const std::string message = load_error(bytes + "xx");
  EXPECT_CONTAINS(message, path());
  EXPECT_CONTAINS(message, "2 more");
}

TEST_F(DamagedCheckpoint, WrongMagic) {
  std::string other = bytes;
  other[0] = 'X';
  const std::string message = load_error(other);
  EXPECT_CONTAINS(message, path());
  EXPECT_CONTAINS(message, "not a dlbench checkpoint");
  EXPECT_CONTAINS(load_error("{\"weights\": []}"), "not a dlbench checkpoint");
}

TEST_F(DamagedCheckpoint, UnsupportedVersion) {
  std::string future = bytes;
  future[8] = 4;  // version 3 (AdamW's second moments) is read since the GPT models
  const std::string message = load_error(future);
  EXPECT_CONTAINS(message, path());
  EXPECT_CONTAINS(message, "format version 4");
  EXPECT_CONTAINS(message, "reads version 3");
}

// Version 1 (no settings) is still read: the same file without the settings string, its size and CRC
// made again.
TEST_F(DamagedCheckpoint, VersionOneIsStillRead) {
  const Checkpoint c = sample_checkpoint();
  const size_t settings_at = 20 + (8 + c.model.size()) + (8 + c.config_digest.size());
  std::string v1 = bytes.substr(0, settings_at) + bytes.substr(settings_at + 8 + c.settings.size());
  v1.resize(v1.size() - 4);
  v1[8] = 1;
  const uint64_t size = v1.size() + 4;
  for (int i = 0; i < 8; ++i) v1[12 + i] = static_cast<char>(size >> (8 * i));
  const uint32_t crc =
      static_cast<uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(v1.data()), v1.size()));
  for (int i = 0; i < 4; ++i) v1.push_back(static_cast<char>(crc >> (8 * i)));
  write_file(path(), v1);
  const Checkpoint loaded = load_checkpoint(path());
  EXPECT_EQ(loaded.step, c.step);
  EXPECT_TRUE(loaded.settings.empty());
  expect_bitwise_equal(loaded.parameters, c.parameters);
}

TEST(Checkpoint, MissingFileOrDirectory) {
  TempDir dir;
  const std::string message = user_error_message([&] { load_checkpoint(dir.file("nope.ckpt")); });
  EXPECT_CONTAINS(message, dir.file("nope.ckpt"));
  EXPECT_CONTAINS(message, "not found");
  EXPECT_CONTAINS(user_error_message([&] { load_checkpoint(dir.path().string()); }), "is a directory");
}

// A failed save throws a UserError naming the path and leaves neither the checkpoint nor a temporary.
void expect_failed_save(const std::string& path, const std::string& expected_text) {
  const std::string message = user_error_message([&] { save_checkpoint(path, sample_checkpoint()); });
  EXPECT_CONTAINS(message, path);
  EXPECT_CONTAINS(message, expected_text);
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::is_regular_file(path, ec));
  const auto folder = std::filesystem::path(path).parent_path();
  if (std::filesystem::is_directory(folder, ec) && folder.string().rfind("/proc", 0) != 0) {
    EXPECT_EQ(temporaries_in(folder), 0);
  }
}

TEST(Checkpoint, UnwritablePathsAreUserErrors) {
  TempDir dir;
  expect_failed_save("/proc/x/y", "does not exist");
  expect_failed_save(dir.file("missing-dir/run.ckpt"), "does not exist");
  write_file(dir.file("a-file"), "x");
  expect_failed_save(dir.file("a-file/run.ckpt"), "not a directory");
  expect_failed_save("/proc/run.ckpt",
                     "choose a writable path");  // /proc refuses new files, even to root
}

TEST(Checkpoint, ADirectoryInTheWayIsRefusedBeforeWriting) {
  TempDir dir;
  const std::string path = dir.file("run.ckpt");
  std::filesystem::create_directory(path);
  write_file(dir.file("run.ckpt/keep"), "x");
  expect_failed_save(path, "is a directory");
  EXPECT_TRUE(std::filesystem::exists(dir.file("run.ckpt/keep")));
}

// The user's own run.ckpt.tmp is neither used nor removed (saves once wrote through that name).
TEST(Checkpoint, SaveLeavesTheUsersOwnFilesAlone) {
  TempDir dir;
  const std::string path = dir.file("run.ckpt");
  write_file(path + ".tmp", "mine");
  save_checkpoint(path, sample_checkpoint());
  EXPECT_EQ(read_file(path + ".tmp"), "mine");
  EXPECT_EQ(load_checkpoint(path).step, sample_checkpoint().step);
}

// A disk that fills up mid-save (a file-size limit: with SIGXFSZ ignored, writes past it fail with
// EFBIG, a real short write) keeps the previous checkpoint and leaves no temporary.
TEST(Checkpoint, FullDiskKeepsThePreviousCheckpoint) {
  TempDir dir;
  const std::string path = dir.file("run.ckpt");
  save_checkpoint(path, sample_checkpoint());
  Checkpoint next = sample_checkpoint();
  next.step = 1;
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 4096;  // the checkpoint is ~8 KB
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string message = user_error_message([&] { save_checkpoint(path, next); });
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_CONTAINS(message, "free disk space");
  EXPECT_CONTAINS(message, path);
  EXPECT_EQ(load_checkpoint(path).step, sample_checkpoint().step);
  EXPECT_EQ(temporaries_in(dir.path()), 0);
}

TEST(Checkpoint, MatchesChecksModelAndSizes) {
  Checkpoint c = sample_checkpoint();
  EXPECT_NO_THROW(check_checkpoint_matches(c, "resnet20", 1000, 64));

  c.model = "resnet50";
  const std::string model = user_error_message([&] { check_checkpoint_matches(c, "resnet20", 1000, 64); });
  EXPECT_CONTAINS(model, "checkpoint is for resnet50, this run trains resnet20");

  c.model = "resnet20";
  const std::string params = user_error_message([&] { check_checkpoint_matches(c, "resnet20", 999, 64); });
  EXPECT_CONTAINS(params, "1000 parameters");
  EXPECT_CONTAINS(params, "999");
  EXPECT_CONTAINS(params, c.config_digest);
  const std::string buffers = user_error_message([&] { check_checkpoint_matches(c, "resnet20", 1000, 65); });
  EXPECT_CONTAINS(buffers, "64 buffer values");
  EXPECT_CONTAINS(buffers, "65");
}

TEST(Checkpoint, MismatchedMomentumIsACallerBug) {
  TempDir dir;
  Checkpoint c = sample_checkpoint();
  c.momentum.resize(3);
  EXPECT_THROW(save_checkpoint(dir.file("run.ckpt"), c), Error);
  c.momentum.clear();  // no optimizer state is fine
  EXPECT_NO_THROW(save_checkpoint(dir.file("run.ckpt"), c));
  EXPECT_TRUE(load_checkpoint(dir.file("run.ckpt")).momentum.empty());
}

}  // namespace
}  // namespace dlbench
