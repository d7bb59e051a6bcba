#include "data/shard.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::TempDir;
using testing::user_error_message;
using testing::write_file;

uint64_t get_u64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s[at + static_cast<size_t>(i)]);
  return v;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Source files under dir/src/CLASS/NAME, with random bytes, and the shard set's place dir/shards.
class ShardFiles : public ::testing::Test {
 protected:
  const std::vector<std::string> classes{"cat", "dog", "bird with space", "fish"};

  std::string src() const { return dir.file("src"); }
  std::string dst() const { return dir.file("shards"); }
  std::string shard(int k) const { return (fs::path(dst()) / shard_file_name(k)).string(); }

  // Adds a file of `bytes` random bytes (0: an empty file) and returns its input; `create` false: the
  // input names a file that does not exist.
  ShardInput add(size_t bytes, int32_t label, bool create = true) {
    const std::string name =
        fmt::format("{}/file_{:04}.jpg", classes[static_cast<size_t>(label)], inputs.size());
    ShardInput input{(fs::path(src()) / name).string(), name, label};
    std::string data(bytes, '\0');
    for (char& c : data) c = static_cast<char>(rng() & 0xff);
    if (create) {
      fs::create_directories(fs::path(input.path).parent_path());
      write_file(input.path, data);
    }
    inputs.push_back(input);
    blobs.push_back(data);
    return input;
  }

  // `count` files of 1..max_bytes random bytes and random labels.
  void add_random(int count, size_t max_bytes) {
    for (int i = 0; i < count; ++i) add(1 + rng() % max_bytes, static_cast<int32_t>(rng() % classes.size()));
  }

  PackResult pack(size_t shard_bytes, bool strict = false) {
    return pack_shards(inputs, classes, dst(), shard_bytes, strict);
  }

  // Every record of `set` equals input i's bytes, label and name, in order, skipping `skipped` inputs.
  void expect_records(const ShardSet& set, const std::vector<size_t>& skipped = {}) {
    std::vector<uint8_t> bytes;
    std::string error;
    int64_t r = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (std::find(skipped.begin(), skipped.end(), i) != skipped.end()) continue;
      ASSERT_LT(r, set.size());
      ASSERT_TRUE(set.read(r, bytes, error)) << error;
      EXPECT_EQ(std::string(bytes.begin(), bytes.end()), blobs[i]) << "record " << r;
      EXPECT_EQ(set.label(r), inputs[i].label) << "record " << r;
      EXPECT_EQ(set.name(r), inputs[i].name) << "record " << r;
      EXPECT_EQ(set.payload_bytes(r), blobs[i].size());
      ++r;
    }
    EXPECT_EQ(r, set.size());
  }

  std::string open_error() const {
    return user_error_message([&] { ShardSet set(dst()); });
  }

  // Overwrites byte `at` of `path` with its complement.
  static void flip_byte(const std::string& path, size_t at) {
    std::string data = read_file(path);
    ASSERT_LT(at, data.size());
    data[at] = static_cast<char>(~data[at]);
    write_file(path, data);
  }

  TempDir dir;
  std::mt19937 rng{1234};
  std::vector<ShardInput> inputs;
  std::vector<std::string> blobs;
};

TEST_F(ShardFiles, RoundTripAcrossSeveralShards) {
  add_random(300, 3000);
  const size_t shard_bytes = 64 << 10;
  std::vector<std::pair<int64_t, int64_t>> calls;
  const PackResult result =
      pack_shards(inputs, classes, dst(), shard_bytes, /*strict=*/true,
                  [&](int64_t done, int64_t total) { calls.emplace_back(done, total); });
  EXPECT_EQ(result.records, 300);
  EXPECT_EQ(result.skipped, 0);
  EXPECT_GT(result.shards, 3);
  ASSERT_EQ(calls.size(), 300u);
  EXPECT_EQ(calls.back(), std::make_pair(int64_t{300}, int64_t{300}));

  // The set: shards and manifest, nothing temporary left; every shard within the limit; bytes counted.
  std::vector<std::string> expected_names;
  int64_t bytes = 0;
  for (int k = 0; k < result.shards; ++k) {
    expected_names.push_back(shard_file_name(k));
    const auto size = static_cast<int64_t>(fs::file_size(shard(k)));
    EXPECT_LE(size, static_cast<int64_t>(shard_bytes)) << shard(k);
    bytes += size;
  }
  expected_names.push_back("manifest");
  std::sort(expected_names.begin(), expected_names.end());
  EXPECT_EQ(list_dir(dst()), expected_names);
  bytes += static_cast<int64_t>(fs::file_size(fs::path(dst()) / "manifest"));
  EXPECT_EQ(result.bytes, bytes);
  EXPECT_TRUE(is_shard_set(dst()));
  EXPECT_FALSE(is_shard_set(src()));

  const ShardSet set(dst());
  EXPECT_EQ(set.size(), 300);
  EXPECT_EQ(set.num_shards(), result.shards);
  EXPECT_EQ(set.class_names(), classes);
  expect_records(set);
  // where() names the shard file and the record within it.
  EXPECT_EQ(set.where(0), fmt::format("{} record 0 ({})", shard(0), inputs[0].name));
  const std::string last = set.where(299);
  EXPECT_CONTAINS(last, shard(static_cast<int>(result.shards - 1)));
  EXPECT_CONTAINS(last, inputs[299].name);
}

TEST_F(ShardFiles, FromMemoryReadsTheSameSet) {
  add_random(50, 2000);
  const PackResult result = pack(16 << 10);
  ASSERT_GT(result.shards, 1);
  std::map<std::string, std::string> files;
  for (const std::string& name : list_dir(dst())) files[name] = read_file((fs::path(dst()) / name).string());
  const ShardSet set = ShardSet::from_memory(dst(), std::move(files));
  expect_records(set);
}

TEST_F(ShardFiles, RecordLargerThanShardBytesGoesAlone) {
  add(100, 0);
  add(5000, 1);
  add(100, 2);
  add(100, 3);
  const PackResult result = pack(1000);
  EXPECT_EQ(result.records, 4);
  EXPECT_EQ(result.shards, 3);  // [100] [5000] [100 100]
  EXPECT_GT(fs::file_size(shard(1)), 5000u);
  EXPECT_LE(fs::file_size(shard(2)), 1000u);
  const ShardSet set(dst());
  expect_records(set);
  EXPECT_CONTAINS(set.where(1), shard(1) + " record 0");
  EXPECT_CONTAINS(set.where(3), shard(2) + " record 1");
}

TEST_F(ShardFiles, UnreadableFilesAreSkippedAndNamed) {
  add(10, 0);
  add(0, 1);  // empty
  add(20, 2);
  add(30, 3, /*create=*/false);  // missing
  fs::create_directories(src() + "/a_directory.jpg");
  inputs.push_back({src() + "/a_directory.jpg", "a_directory.jpg", 0});
  blobs.push_back("");
  add(40, 0);
  const PackResult result = pack(1 << 20);
  EXPECT_EQ(result.records, 3);
  EXPECT_EQ(result.skipped, 3);
  EXPECT_EQ(result.skipped_paths, (std::vector<std::string>{inputs[1].path, inputs[3].path, inputs[4].path}));
  ASSERT_EQ(result.skipped_reasons.size(), 3u);
  EXPECT_EQ(result.skipped_reasons[0], "empty file");
  EXPECT_CONTAINS(result.skipped_reasons[1], "No such file");
  EXPECT_EQ(result.skipped_reasons[2], "a directory");
  const ShardSet set(dst());
  expect_records(set, {1, 3, 4});
}

TEST_F(ShardFiles, StrictFailsOnTheFirstUnreadableFileAndLeavesNothing) {
  add_random(40, 2000);  // several shards written before the failure
  add(30, 1, /*create=*/false);
  add(30, 1);
  const std::string message = user_error_message([&] { pack(8 << 10, /*strict=*/true); });
  EXPECT_CONTAINS(message, inputs[40].path);
  EXPECT_CONTAINS(message, "No such file");
  EXPECT_FALSE(fs::exists(dst()));  // created by pack, removed again

  fs::create_directories(dst());  // an existing empty DST stays, empty
  user_error_message([&] { pack(8 << 10, /*strict=*/true); });
  EXPECT_TRUE(list_dir(dst()).empty());
}

TEST_F(ShardFiles, NothingReadableIsAnError) {
  add(0, 0);
  add(5, 0, /*create=*/false);
  EXPECT_CONTAINS(user_error_message([&] { pack(1 << 20); }), "none of the 2 files");
  EXPECT_FALSE(fs::exists(dst()));
}

TEST_F(ShardFiles, DestinationMustBeEmpty) {
  add(10, 0);
  fs::create_directories(dst());
  write_file(dst() + "/old.txt", "keep me");
  const std::string message = user_error_message([&] { pack(1 << 20); });
  EXPECT_CONTAINS(message, dst());
  EXPECT_CONTAINS(message, "not empty");
  EXPECT_EQ(list_dir(dst()), std::vector<std::string>{"old.txt"});
  EXPECT_EQ(read_file(dst() + "/old.txt"), "keep me");

  write_file(dir.file("a_file"), "x");
  EXPECT_CONTAINS(
      user_error_message([&] { pack_shards(inputs, classes, dir.file("a_file"), 1 << 20, false); }),
      "not a directory");
}

TEST_F(ShardFiles, UnwritableDestinationIsAUserError) {
  add(10, 0);
  // Below a regular file: no directory can be made there, not even by root.
  write_file(dir.file("a_file"), "x");
  const std::string below_file = dir.file("a_file") + "/shards";
  EXPECT_CONTAINS(user_error_message([&] { pack_shards(inputs, classes, below_file, 1 << 20, false); }),
                  below_file);
  EXPECT_EQ(read_file(dir.file("a_file")), "x");
}

TEST_F(ShardFiles, ReadOnlyDestinationIsAUserError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  add(10, 0);
  const std::string locked = dir.file("locked");
  fs::create_directories(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string message =
      user_error_message([&] { pack_shards(inputs, classes, locked + "/shards", 1 << 20, false); });
  EXPECT_CONTAINS(message, locked + "/shards");
  // An existing but read-only DST: the first shard cannot be created.
  fs::permissions(locked, fs::perms::owner_all);
  fs::create_directories(locked + "/ro");
  fs::permissions(locked + "/ro", fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_CONTAINS(user_error_message([&] { pack_shards(inputs, classes, locked + "/ro", 1 << 20, false); }),
                  "cannot create");
  fs::permissions(locked + "/ro", fs::perms::owner_all);
  EXPECT_TRUE(list_dir(locked + "/ro").empty());
}

TEST_F(ShardFiles, LabelsAndClassNamesAreCheckedAtPack) {
  add(10, 0);
  inputs[0].label = 4;  // 4 classes: 0..3
  std::string message = user_error_message([&] { pack(1 << 20); });
  EXPECT_CONTAINS(message, inputs[0].path);
  EXPECT_CONTAINS(message, "label 4");
  inputs[0].label = -1;
  EXPECT_CONTAINS(user_error_message([&] { pack(1 << 20); }), "label -1");
  inputs[0].label = 0;
  EXPECT_CONTAINS(user_error_message([&] {
                    pack_shards(inputs, {"a", "b\nc"}, dst(), 1 << 20, false);
                  }),
                  "line break");
  EXPECT_FALSE(fs::exists(dst()));
}

// Rewrites the manifest with `edit` applied to its body, and a correct checksum.
void rewrite_manifest(const std::string& path, const std::function<void(std::string&)>& edit) {
  std::string text = read_file(path);
  text.erase(text.rfind("crc32 "));
  edit(text);
  text += fmt::format("crc32 {:08x}\n",
                      static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(text.data()),
                                                  static_cast<uInt>(text.size()))));
  write_file(path, text);
}

TEST_F(ShardFiles, ManifestIsChecked) {
  add(10, 0);
  add(10, 3);
  pack(1 << 20);
  const std::string manifest = dst() + "/manifest";
  const std::string good = read_file(manifest);
  EXPECT_NE(good.find("class bird with space\n"), std::string::npos) << good;

  // A byte changed: the checksum says so.
  std::string edited = good;
  edited[edited.find("class cat")] = 'C';
  write_file(manifest, edited);
  std::string message = open_error();
  EXPECT_CONTAINS(message, manifest);
  EXPECT_CONTAINS(message, "checksum mismatch");

  // Fewer classes (with a correct checksum): label 3 of record 1 is now out of range.
  write_file(manifest, good);
  rewrite_manifest(manifest, [](std::string& t) {
    t.replace(t.find("classes 4\n"), 10, "classes 3\n");
    t.erase(t.find("class fish\n"), 11);
  });
  message = open_error();
  EXPECT_CONTAINS(message, shard(0));
  EXPECT_CONTAINS(message, "label 3");

  // A record count that disagrees with the shard.
  write_file(manifest, good);
  rewrite_manifest(manifest, [](std::string& t) {
    t.replace(t.find("records 2\n"), 10, "records 3\n");
    const size_t at = t.find("shard-00000.dlbs 2 ");
    t.replace(at, 18, "shard-00000.dlbs 3");
  });
  message = open_error();
  EXPECT_CONTAINS(message, shard(0));
  EXPECT_CONTAINS(message, "holds 2 records");

  // Not a manifest at all; no manifest.
  write_file(manifest, "hello\n");
  EXPECT_CONTAINS(open_error(), "not a dlbench shard set manifest");
  fs::remove(manifest);
  EXPECT_FALSE(is_shard_set(dst()));
  EXPECT_CONTAINS(open_error(), "no manifest");
  EXPECT_CONTAINS(user_error_message([&] { ShardSet set(dir.file("nowhere")); }), "not found");
}

TEST_F(ShardFiles, FlippedPayloadByteFailsThatRecordOnly) {
  add(100, 0);
  add(100, 1);
  add(100, 2);
  pack(1 << 20);
  // Record 1 starts at 16 + (20 + name + 100 + 4); its payload after its 20-byte header and name.
  const size_t record1 = 16 + 20 + inputs[0].name.size() + 100 + 4;
  flip_byte(shard(0), record1 + 20 + inputs[1].name.size() + 50);
  const ShardSet set(dst());  // the index is intact: opens
  std::vector<uint8_t> bytes;
  std::string error;
  EXPECT_TRUE(set.read(0, bytes, error)) << error;
  EXPECT_FALSE(set.read(1, bytes, error));
  EXPECT_CONTAINS(error, shard(0) + " record 1 (" + inputs[1].name + ")");
  EXPECT_CONTAINS(error, "CRC mismatch");
  EXPECT_TRUE(set.read(2, bytes, error)) << error;
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), blobs[2]);
}

TEST_F(ShardFiles, RecordHeaderDisagreeingWithIndexFails) {
  add(100, 0);
  add(100, 1);
  pack(1 << 20);
  flip_byte(shard(0), 16 + 4);  // record 0's label
  const ShardSet set(dst());
  std::vector<uint8_t> bytes;
  std::string error;
  EXPECT_FALSE(set.read(0, bytes, error));
  EXPECT_CONTAINS(error, shard(0) + " record 0");
  EXPECT_CONTAINS(error, "disagrees with the index");
  EXPECT_TRUE(set.read(1, bytes, error)) << error;
}

TEST_F(ShardFiles, TruncatedShardFailsAtOpen) {
  add_random(20, 500);
  pack(1 << 20);
  const std::string data = read_file(shard(0));
  for (size_t keep : {data.size() - 1, data.size() / 2, size_t{10}, size_t{0}}) {
    write_file(shard(0), data.substr(0, keep));
    const std::string message = open_error();
    EXPECT_CONTAINS(message, shard(0));
    EXPECT_CONTAINS(message, "truncated");
  }
}

TEST_F(ShardFiles, ShardTruncatedAfterOpenFailsOnRead) {
  add(100, 0);
  add(100, 1);
  pack(1 << 20);
  const ShardSet set(dst());
  fs::resize_file(shard(0), 100);
  std::vector<uint8_t> bytes;
  std::string error;
  EXPECT_FALSE(set.read(1, bytes, error));
  EXPECT_CONTAINS(error, shard(0) + " record 1");
  EXPECT_CONTAINS(error, "short read");
}

TEST_F(ShardFiles, BadFileMagicFailsAtOpen) {
  add(100, 0);
  pack(1 << 20);
  flip_byte(shard(0), 3);
  const std::string message = open_error();
  EXPECT_CONTAINS(message, shard(0));
  EXPECT_CONTAINS(message, "bad magic");
}

TEST_F(ShardFiles, BrokenIndexCrcFailsAtOpen) {
  add_random(10, 500);
  pack(1 << 20);
  const std::string data = read_file(shard(0));
  const uint64_t index_offset = get_u64(data, data.size() - 32);
  ASSERT_LT(index_offset, data.size() - 32);
  flip_byte(shard(0), static_cast<size_t>(index_offset) + 30);  // inside the first entry's name
  const std::string message = open_error();
  EXPECT_CONTAINS(message, shard(0));
  EXPECT_CONTAINS(message, "index CRC mismatch");

  // A broken footer is found too.
  write_file(shard(0), data);
  flip_byte(shard(0), data.size() - 20);
  EXPECT_CONTAINS(open_error(), "footer CRC mismatch");
}

TEST_F(ShardFiles, MissingOrSwappedShardFailsAtOpen) {
  add_random(40, 2000);
  const PackResult result = pack(8 << 10);
  ASSERT_GE(result.shards, 3);
  const std::string saved = read_file(shard(1));
  fs::remove(shard(1));
  std::string message = open_error();
  EXPECT_CONTAINS(message, shard(1));
  EXPECT_CONTAINS(message, "missing");
  // Shard 2's bytes under shard 1's name.
  fs::copy_file(shard(2), shard(1));
  message = open_error();
  EXPECT_CONTAINS(message, shard(1));
  write_file(shard(1), saved);
  ShardSet set(dst());
  expect_records(set);
}

TEST_F(ShardFiles, ConcurrentReadsGiveTheRightBytes) {
  add_random(200, 4000);
  pack(32 << 10);
  const ShardSet set(dst());
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 local(static_cast<unsigned>(t));
      std::vector<uint8_t> bytes;
      std::string error;
      for (int n = 0; n < 2000; ++n) {
        const int64_t i = static_cast<int64_t>(local() % static_cast<unsigned>(set.size()));
        if (!set.read(i, bytes, error) ||
            std::string(bytes.begin(), bytes.end()) != blobs[static_cast<size_t>(i)])
          ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(ShardFiles, OutOfRangeRecordIsACallerBug) {
  add(10, 0);
  pack(1 << 20);
  const ShardSet set(dst());
  std::vector<uint8_t> bytes;
  std::string error;
  EXPECT_THROW(set.read(1, bytes, error), Error);
  EXPECT_THROW(set.label(-1), Error);
}

}  // namespace
}  // namespace dlbench
