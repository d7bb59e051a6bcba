// The real-image commands through the dlbench binary: an IDX set exported as JPEG folders, packed into
// shards, benchmarked, and trained from both (the same losses: the same pixels reach the network), plus
// the bad-input paths of pack, data-bench, export-images and training on a folder with a corrupt file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace dlbench::testing {
namespace {

namespace fs = std::filesystem;

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void write_gz(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

// A tiny Fashion-MNIST look-alike: `count` 28x28 images whose brightness pattern depends on the label.
void write_idx_set(const fs::path& dir, const std::string& prefix, uint32_t count) {
  std::vector<uint8_t> images, labels;
  put_u32(images, 2051);
  put_u32(images, count);
  put_u32(images, 28);
  put_u32(images, 28);
  put_u32(labels, 2049);
  put_u32(labels, count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t label = i % 10;
    labels.push_back(static_cast<uint8_t>(label));
    for (uint32_t p = 0; p < 28 * 28; ++p)
      images.push_back(static_cast<uint8_t>(((p / 28) * 9 + label * 23 + (p % 28) * (label + 1)) % 256));
  }
  write_gz(dir / (prefix + "-images-idx3-ubyte.gz"), images);
  write_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), labels);
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_text(path.string())); }

TEST(ImageDataCli, ExportPackBenchAndTrainFromFolderAndShardsAlike) {
  const fs::path dir = temp_dir("image_cli");
  fs::create_directories(dir / "idx");
  write_idx_set(dir / "idx", "train", 60);
  write_idx_set(dir / "idx", "t10k", 20);

  CommandResult exported =
      run_dlbench("export-images " + (dir / "jpeg").string() + " --data " + (dir / "idx").string());
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir / "jpeg" / "train"))
    files += entry.is_regular_file();
  EXPECT_EQ(files, 60);
  EXPECT_TRUE(fs::exists(dir / "jpeg" / "val" / "class-03"));

  CommandResult packed =
      run_dlbench("pack " + (dir / "jpeg").string() + " " + (dir / "shards").string() + " --shard-mb 0.01");
  ASSERT_EQ(packed.exit_code, 0) << packed.err;
  EXPECT_NE(packed.out.find("60 images of 10 classes"), std::string::npos) << packed.out;

  CommandResult bench =
      run_dlbench("data-bench --data " + (dir / "shards").string() +
                  " --batch-size 16 --batches 4 --data-threads 2 --json " + (dir / "db.json").string());
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const nlohmann::json db = read_json(dir / "db.json");
  EXPECT_GT(db["images_per_second"].get<double>(), 0);
  EXPECT_EQ(db["image_size"], 28);
  EXPECT_EQ(db["channels"], 1);

  std::vector<double> losses[2];
  int k = 0;
  for (const char* data : {"jpeg", "shards"}) {
    const fs::path json = dir / (std::string(data) + ".json");
    CommandResult trained =
        run_dlbench("train --device cpu --model resnet20 --batch-size 8 --steps 3 --data-threads 2 --data " +
                    (dir / data).string() + " --json " + json.string());
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    const nlohmann::json j = read_json(json);
    losses[k++] = j["losses"].get<std::vector<double>>();
    EXPECT_TRUE(j.contains("data_wait_ms_per_step"));
    EXPECT_TRUE(j.contains("compute_images_per_second"));
    EXPECT_TRUE(j.contains("test_accuracy"));  // val/ was found and evaluated
  }
  EXPECT_EQ(losses[0], losses[1]) << "an image folder and its shards must feed the same pixels";
  fs::remove_all(dir);
}

TEST(ImageDataCli, ACorruptImageIsSkippedWithAWarningOrStopsUnderStrict) {
  const fs::path dir = temp_dir("image_cli_bad");
  fs::create_directories(dir / "idx");
  write_idx_set(dir / "idx", "train", 20);
  write_idx_set(dir / "idx", "t10k", 10);
  ASSERT_EQ(
      run_dlbench("export-images " + (dir / "jpeg").string() + " --data " + (dir / "idx").string()).exit_code,
      0);
  const fs::path bad = dir / "jpeg" / "train" / "class-01" / "00001.jpg";
  ASSERT_TRUE(fs::exists(bad));
  {
    std::ofstream out(bad, std::ios::binary | std::ios::trunc);
    out << "this is not a JPEG";
  }
  const std::string train =
      "train --device cpu --model resnet20 --batch-size 20 --steps 1 --data " + (dir / "jpeg").string();
  CommandResult lenient = run_dlbench(train);
  EXPECT_EQ(lenient.exit_code, 0) << lenient.err;
  EXPECT_NE(lenient.err.find("00001.jpg"), std::string::npos) << lenient.err;
  CommandResult strict = run_dlbench(train + " --strict --mlperf-log " + (dir / "aborted.log").string());
  EXPECT_EQ(strict.exit_code, 1);
  // The run stopped inside its first step: the MLPerf log ends with run_stop, status aborted.
  const std::string mllog = read_text((dir / "aborted.log").string());
  EXPECT_NE(mllog.find("\"key\":\"run_start\""), std::string::npos) << mllog;
  EXPECT_NE(mllog.find("\"status\":\"aborted\""), std::string::npos) << mllog;
  EXPECT_EQ(count_lines(strict.err), 1) << strict.err;
  EXPECT_NE(strict.err.find("00001.jpg"), std::string::npos) << strict.err;
  fs::remove_all(dir);
}

TEST(MlperfLogCli, ATrainingRunWritesTheMlperfEventsInOrder) {
  const fs::path dir = temp_dir("mlperf_log");
  fs::create_directories(dir / "idx");
  write_idx_set(dir / "idx", "train", 40);
  write_idx_set(dir / "idx", "t10k", 20);
  const fs::path log = dir / "mllog.txt";
  CommandResult r = run_dlbench("train --device cpu --model resnet20 --batch-size 20 --epochs 2 --data " +
                                (dir / "idx").string() + " --mlperf-log " + log.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> keys;
  std::vector<nlohmann::json> events;
  std::istringstream in(read_text(log.string()));
  for (std::string line; std::getline(in, line);) {
    ASSERT_EQ(line.rfind(":::MLLOG ", 0), 0u) << line;
    nlohmann::json e = nlohmann::json::parse(line.substr(9));
    for (const char* field : {"namespace", "time_ms", "event_type", "key", "value", "metadata"})
      ASSERT_TRUE(e.contains(field)) << field << " missing: " << line;
    keys.push_back(e["key"]);
    events.push_back(e);
  }
  auto position = [&](const std::string& key, size_t from = 0) {
    return std::find(keys.begin() + static_cast<std::ptrdiff_t>(from), keys.end(), key) - keys.begin();
  };
  ASSERT_EQ(keys.front(), "init_start");
  EXPECT_LT(position("global_batch_size"), position("init_stop"));
  EXPECT_LT(position("init_stop"), position("run_start"));
  const size_t eval1 = position("eval_accuracy");
  EXPECT_LT(position("epoch_stop"), eval1);
  EXPECT_LT(eval1, position("eval_accuracy", eval1 + 1));  // one evaluation per epoch
  EXPECT_EQ(keys.back(), "run_stop");
  EXPECT_EQ(events.back()["metadata"]["status"], "success");
  EXPECT_EQ(events[position("global_batch_size")]["value"], 20);
  EXPECT_EQ(events[eval1]["metadata"]["epoch_num"], 1);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_GE(events[i]["time_ms"], events[i - 1]["time_ms"]);
  fs::remove_all(dir);
}

TEST(ImageDataCli, BadArgumentsGiveOneLineAndExitOne) {
  const fs::path dir = temp_dir("image_cli_args");
  fs::create_directories(dir / "full");
  { std::ofstream(dir / "full" / "x") << "x"; }
  for (const std::string& args :
       {"pack " + (dir / "missing").string() + " " + (dir / "out").string(),
        "pack " + dir.string() + " " + (dir / "full").string(),
        "data-bench --data " + (dir / "full").string(),
        "export-images " + (dir / "full").string() + " --data " + (dir / "missing").string(),
        "train --device cpu --data " + (dir / "missing").string()}) {
    CommandResult r = run_dlbench(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty() || r.out.find("error") == std::string::npos) << r.out;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dlbench::testing
