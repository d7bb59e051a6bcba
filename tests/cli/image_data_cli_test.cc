// The real-image commands through the dlbench binary: an IDX set exported as JPEG folders, packed into
// shards, benchmarked, and trained from both (the same losses: the same pixels reach the network), plus
// the bad-input paths of pack, data-bench, export-images and training on a folder with a corrupt file.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
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

// A tiny Fashion-MNIST look-alike: `count` images of side `rows` whose brightness pattern depends on the
// label; from image `noise_from` on, random noise (large JPEGs: a write that a file-size limit cuts).
void write_idx_set(const fs::path& dir, const std::string& prefix, uint32_t count, uint32_t rows = 28,
                   uint32_t noise_from = UINT32_MAX) {
  std::vector<uint8_t> images, labels;
  put_u32(images, 2051);
  put_u32(images, count);
  put_u32(images, rows);
  put_u32(images, rows);
  put_u32(labels, 2049);
  put_u32(labels, count);
  uint32_t noise = 12345;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t label = i % 10;
    labels.push_back(static_cast<uint8_t>(label));
    for (uint32_t p = 0; p < rows * rows; ++p) {
      noise = noise * 1103515245 + 12345;
      images.push_back(i >= noise_from ? static_cast<uint8_t>(noise >> 16)
                                       : static_cast<uint8_t>(
                                             ((p / rows) * 9 + label * 23 + (p % rows) * (label + 1)) % 256));
    }
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
  // --json over a file of the user's that is not one JSON object: refused before the images are read.
  std::ofstream(dir / "notes.txt") << "my notes\n";
  CommandResult over_notes =
      run_dlbench("data-bench --data " + (dir / "shards").string() + " --batch-size 16 --batches 1 --json " +
                  (dir / "notes.txt").string());
  EXPECT_EQ(over_notes.exit_code, 1) << over_notes.err;
  EXPECT_NE(over_notes.err.find("the file exists and is not a JSON object"), std::string::npos)
      << over_notes.err;
  EXPECT_EQ(read_text((dir / "notes.txt").string()), "my notes\n");

  // --digest: the same seed gives the same batches in every run and from folder and shards alike; the
  // batches in another dtype are other bytes. (These small gray images are not cropped: the seed
  // changes nothing here.)
  auto digest = [&](const std::string& data, const std::string& precision) {
    const fs::path json = dir / "digest.json";
    CommandResult r =
        run_dlbench("data-bench --data " + (dir / data).string() +
                    " --batch-size 16 --batches 3 --warmup-batches 1 --data-threads 2 --digest --precision " +
                    precision + " --json " + json.string());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("digest "), std::string::npos) << r.out;
    return read_json(json).value("digest", std::string());
  };
  const std::string first = digest("shards", "fp16");
  EXPECT_EQ(first.size(), 8u);
  EXPECT_EQ(digest("shards", "fp16"), first);
  EXPECT_EQ(digest("jpeg/train", "fp16"), first);
  EXPECT_NE(digest("shards", "fp32"), first);

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

// ---------------------------------------------------------------------------------------------------------
// Nothing lost, nothing left behind (issue 23): pack and export-images build DST in a temporary folder beside
// it and rename it into place only when complete.

// The names in `folder` (not recursive), sorted.
std::vector<std::string> entries(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Every path under `root` with its size (a tree to compare before and after a command).
std::vector<std::string> tree(const fs::path& root) {
  std::vector<std::string> paths;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    paths.push_back(fmt::format("{} {}", fs::relative(entry.path(), root).string(),
                                entry.is_regular_file() ? std::to_string(entry.file_size()) : "folder"));
  std::sort(paths.begin(), paths.end());
  return paths;
}

int count_files(const fs::path& root) {
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) files += entry.is_regular_file();
  return files;
}

// ROOT/<class>/<n>.jpg: `per_class` small files per class (pack copies bytes; it does not decode them).
void write_class_folders(const fs::path& root, const std::vector<std::string>& classes, int per_class,
                         size_t bytes = 16) {
  for (const std::string& c : classes) {
    fs::create_directories(root / c);
    for (int i = 0; i < per_class; ++i)
      std::ofstream(root / c / (std::to_string(i) + ".jpg")) << std::string(bytes, 'x');
  }
}

// The temporary folder a run is building beside DST in `folder` (empty when there is none).
fs::path temporary_in(const fs::path& folder) {
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().filename().string().find(".dlbench-tmp.") != std::string::npos) return entry.path();
  return {};
}

// Runs dlbench with `args` in the background, its output to `log`.
pid_t start_dlbench(const std::vector<std::string>& args, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644),
              in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    std::vector<char*> argv{const_cast<char*>(DLBENCH_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(DLBENCH_BINARY, argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits (up to 20 s) until the run has a temporary folder in `folder` holding at least `files` files, then
// sends `signal_number` and returns the exit status; -1 if the run ended before it got that far.
int signal_midway(pid_t pid, const fs::path& folder, int files, int signal_number) {
  for (int tries = 0; tries < 20000; ++tries) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return -1;
    std::error_code ec;
    const fs::path temporary = temporary_in(folder);
    int found = 0;
    if (!temporary.empty())
      for (fs::recursive_directory_iterator it(temporary, ec), end; !ec && it != end; it.increment(ec))
        found += it->is_regular_file(ec);
    if (found >= files) {
      ::kill(pid, signal_number);
      ::waitpid(pid, &status, 0);
      return status;
    }
    ::usleep(1000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

TEST(PackCli, RefusesADestinationInsideItsSourceOrHoldingIt) {
  const fs::path dir = temp_dir("pack_inside");
  write_class_folders(dir / "imgs", {"a", "b"}, 3);
  fs::create_directory_symlink(dir / "imgs", dir / "link");
  const std::vector<std::string> before = tree(dir);
  const std::string imgs = (dir / "imgs").string(), link = (dir / "link").string();
  for (const std::string& args : {imgs + " " + imgs + "/packed",  // the case: a class "packed" added
                                  imgs + " " + imgs,              // the same folder
                                  imgs + "/a " + imgs,            // the source inside the destination
                                  link + " " + imgs + "/packed",  // through a symbolic link
                                  imgs + " " + link + "/packed", imgs + " " + imgs + "/a/../packed"}) {
    CommandResult r = run_dlbench("pack " + args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.out << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("SRC"), std::string::npos) << r.err;
    EXPECT_EQ(tree(dir), before) << args;
  }
  // Beside the source is fine.
  EXPECT_EQ(run_dlbench("pack " + imgs + " " + (dir / "packed").string()).exit_code, 0);
  fs::remove_all(dir);
}

TEST(PackCli, AnEmptyClassFolderIsRefusedByPackAndByTheReaders) {
  const fs::path dir = temp_dir("empty_class");
  write_class_folders(dir / "imgs", {"a", "c"}, 2);
  fs::create_directories(dir / "imgs" / "b_empty");
  const std::string imgs = (dir / "imgs").string(), out = (dir / "out").string();
  for (const std::string& args :
       {"pack " + imgs + " " + out, "data-bench --batches 1 --batch-size 2 --data " + imgs,
        "train --device cpu --model resnet20 --batch-size 2 --steps 1 --data " + imgs}) {
    CommandResult r = run_dlbench(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.out << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("b_empty"), std::string::npos) << args << "\n" << r.err;
  }
  EXPECT_EQ(entries(dir), std::vector<std::string>{"imgs"});

  // ROOT/train and ROOT/val: an empty class in val is refused before train is packed.
  write_class_folders(dir / "root" / "train", {"a", "b"}, 2);
  write_class_folders(dir / "root" / "val", {"a"}, 2);
  fs::create_directories(dir / "root" / "val" / "b");
  CommandResult split = run_dlbench("pack " + (dir / "root").string() + " " + out);
  EXPECT_EQ(split.exit_code, 1) << split.out;
  EXPECT_NE(split.err.find("val/b"), std::string::npos) << split.err;
  EXPECT_FALSE(fs::exists(out));

  // A class whose only images cannot be read is as empty once packed.
  fs::remove_all(dir / "imgs" / "b_empty");
  fs::create_directories(dir / "imgs" / "b");
  std::ofstream(dir / "imgs" / "b" / "zero.jpg").close();
  CommandResult unreadable = run_dlbench("pack " + imgs + " " + out);
  EXPECT_EQ(unreadable.exit_code, 1) << unreadable.out;
  EXPECT_NE(unreadable.err.find("b:"), std::string::npos) << unreadable.err;
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"imgs", "root"}));
  fs::remove_all(dir);
}

// `command` under a file-size limit of `kib` KiB, SIGXFSZ ignored: a write past it fails with EFBIG.
CommandResult run_with_file_limit(int kib, const std::string& command) {
  return run_shell("bash -c 'trap \"\" XFSZ; ulimit -f " + std::to_string(kib) + "; exec " +
                   std::string(DLBENCH_BINARY) + " " + command + "'");
}

TEST(ExportImagesCli, AFullDiskLeavesNothingAndTheRerunWorks) {
  const fs::path dir = temp_dir("export_full");
  fs::create_directories(dir / "idx");
  // 64x64: the first 40 images small JPEGs, the rest noise, larger than the limit: it is hit midway.
  write_idx_set(dir / "idx", "train", 60, 64, 40);
  write_idx_set(dir / "idx", "t10k", 10);
  const std::string export_images =
      "export-images " + (dir / "out").string() + " --data " + (dir / "idx").string();
  for (bool existing_empty_dst : {false, true}) {
    if (existing_empty_dst) fs::create_directories(dir / "out");
    CommandResult full = run_with_file_limit(4, export_images);
    EXPECT_EQ(full.exit_code, 1) << full.out << full.err;
    EXPECT_EQ(count_lines(full.err), 1) << full.err;
    EXPECT_NE(full.err.find("File too large"), std::string::npos) << full.err;
    EXPECT_NE(full.err.find("nothing was written"), std::string::npos) << full.err;
    // No partial tree, no temporary: DST as it was (absent, or the empty folder the user made).
    EXPECT_EQ(entries(dir), existing_empty_dst ? (std::vector<std::string>{"idx", "out"})
                                               : std::vector<std::string>{"idx"});
    EXPECT_TRUE(!existing_empty_dst || fs::is_empty(dir / "out"));
  }
  CommandResult rerun = run_dlbench(export_images);
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_EQ(count_files(dir / "out"), 70);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"idx", "out"}));
  fs::remove_all(dir);
}

TEST(PackCli, AFullDiskLeavesNothingAndTheRerunWorks) {
  const fs::path dir = temp_dir("pack_full");
  write_class_folders(dir / "imgs", {"a", "b"}, 20, 1000);
  const std::string pack =
      "pack " + (dir / "imgs").string() + " " + (dir / "out").string() + " --shard-mb 0.02";
  for (bool existing_empty_dst : {false, true}) {
    if (existing_empty_dst) fs::create_directories(dir / "out");
    CommandResult full = run_with_file_limit(8, pack);  // a shard of 20 KiB: the first one is cut
    EXPECT_EQ(full.exit_code, 1) << full.out << full.err;
    EXPECT_EQ(count_lines(full.err), 1) << full.err;
    EXPECT_NE(full.err.find("File too large"), std::string::npos) << full.err;
    EXPECT_EQ(entries(dir), existing_empty_dst ? (std::vector<std::string>{"imgs", "out"})
                                               : std::vector<std::string>{"imgs"});
    EXPECT_TRUE(!existing_empty_dst || fs::is_empty(dir / "out"));
  }
  CommandResult rerun = run_dlbench(pack);
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_NE(rerun.out.find("40 images of 2 classes"), std::string::npos) << rerun.out;
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"imgs", "out"}));
  fs::remove_all(dir);
}

// A data set for a run long enough to be stopped midway: an image folder of 2000 files for pack (with
// train/ and val/), an IDX set of 3000 images for export-images.
struct StopCase {
  const char* command;
  // Files in the temporary folder when it is stopped: a few shards of pack, 20 JPEGs of export-images.
  int files_midway() const { return std::string(command) == "pack" ? 3 : 20; }
  std::vector<std::string> args(const fs::path& dir) const {
    if (std::string(command) == "pack")
      return {"pack", (dir / "root").string(), (dir / "out").string(), "--shard-mb", "0.05"};
    return {"export-images", (dir / "out").string(), "--data", (dir / "idx").string()};
  }
  void make_input(const fs::path& dir) const {
    if (std::string(command) == "pack") {
      write_class_folders(dir / "root" / "train", {"a", "b", "c", "d"}, 500, 200);
      write_class_folders(dir / "root" / "val", {"a", "b", "c", "d"}, 10, 200);
    } else {
      fs::create_directories(dir / "idx");
      write_idx_set(dir / "idx", "train", 3000);
      write_idx_set(dir / "idx", "t10k", 10);
    }
  }
};

TEST(StopCli, SigintOrSigtermStopsPackAndExportCleanlyLeavingNothing) {
  for (const StopCase c : {StopCase{"pack"}, StopCase{"export-images"}}) {
    const fs::path dir = temp_dir("stop");
    c.make_input(dir);
    const std::string log_path = dir.string() + ".log";
    for (int signal_number : {SIGINT, SIGTERM}) {
      for (bool existing_empty_dst : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {}{}", c.command, signal_number == SIGINT ? "SIGINT" : "SIGTERM",
                                 existing_empty_dst ? ", DST an empty folder" : ""));
        if (existing_empty_dst) fs::create_directories(dir / "out");
        const std::vector<std::string> before = entries(dir);
        const pid_t pid = start_dlbench(c.args(dir), log_path);
        const int status = signal_midway(pid, dir, c.files_midway(), signal_number);
        const std::string log = read_text(log_path);
        ASSERT_NE(status, -1) << "the run ended before it could be stopped: " << log;
        ASSERT_TRUE(WIFEXITED(status)) << log;
        EXPECT_EQ(WEXITSTATUS(status), 128 + signal_number) << log;
        EXPECT_NE(log.find("nothing was written"), std::string::npos) << log;
        EXPECT_EQ(entries(dir), before) << log;  // no temporary, no partial DST
        EXPECT_TRUE(!existing_empty_dst || fs::is_empty(dir / "out"));
        fs::remove_all(dir / "out");
      }
    }
    fs::remove(log_path);
    fs::remove_all(dir);
  }
}

TEST(StopCli, AfterSigkillTheRerunClearsTheLeftoversAndWorks) {
  for (const StopCase c : {StopCase{"pack"}, StopCase{"export-images"}}) {
    SCOPED_TRACE(c.command);
    const fs::path dir = temp_dir("kill");
    c.make_input(dir);
    const fs::path log = dir.string() + ".log";
    const int status = signal_midway(start_dlbench(c.args(dir), log), dir, c.files_midway(), SIGKILL);
    ASSERT_NE(status, -1) << read_text(log.string());
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    EXPECT_FALSE(temporary_in(dir).empty()) << "a killed run leaves its temporary folder";
    EXPECT_FALSE(fs::exists(dir / "out"));

    const pid_t rerun = start_dlbench(c.args(dir), log);
    int rerun_status = 0;
    ::waitpid(rerun, &rerun_status, 0);
    ASSERT_TRUE(WIFEXITED(rerun_status) && WEXITSTATUS(rerun_status) == 0) << read_text(log.string());
    EXPECT_TRUE(temporary_in(dir).empty()) << "the rerun removes what the killed run left";
    if (std::string(c.command) == "pack")
      EXPECT_NE(read_text(log.string()).find("2000 images of 4 classes"), std::string::npos);
    else
      EXPECT_EQ(count_files(dir / "out"), 3010);
    fs::remove(log);
    fs::remove_all(dir);
  }
}

TEST(DataBenchCli, ImageSizeAndThreadsAreBoundedWithOneLine) {
  const fs::path dir = temp_dir("data_bench_bounds");
  fs::create_directories(dir / "idx");
  write_idx_set(dir / "idx", "train", 20);
  write_idx_set(dir / "idx", "t10k", 10);
  ASSERT_EQ(
      run_dlbench("export-images " + (dir / "jpeg").string() + " --data " + (dir / "idx").string()).exit_code,
      0);
  const std::string bench = "data-bench --batches 1 --warmup-batches 0 --data " + (dir / "jpeg").string();
  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--image-size 100000", "4096"},  // the case: killed by the kernel at 24 GB
           {"--image-size 4097", "4096"},
           {"--image-size 4", "8..4096"},
           {"--image-size 4096 --batch-size 1000000", "GiB"},  // within the bound, not within memory
           {"--data-threads 100000", "core"},
           {"--data-threads -2", "--data-threads"}}) {
    CommandResult r = run_dlbench(bench + " " + args, 60);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(args.substr(0, args.find(' '))), std::string::npos) << r.err;
  }
  // A size that is no whole number of 1 or more is the parser's: exit 2.
  for (const std::string size : {"-1", "0"}) {
    CommandResult r = run_dlbench(bench + " --image-size " + size, 60);
    EXPECT_EQ(r.exit_code, 2) << size << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("--image-size " + size + ": give a whole number, 1 or more"), std::string::npos)
        << r.err;
  }
  CommandResult ok = run_dlbench(bench + " --image-size 8 --batch-size 4 --data-threads 1");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dlbench::testing
