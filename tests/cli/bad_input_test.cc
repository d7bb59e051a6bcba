// Bad input gets one clear line on stderr and a non-zero exit: never a crash, a hang or a half-written
// output file. Each case runs the real binary.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cli/tiny_data.h"
#include "cli_util.h"

namespace dlbench::testing {
namespace {

namespace fs = std::filesystem;

const std::string kSmallModel = "train --model resnet20 --batch-size 8 --threads 1 ";
const std::string kSmallTrain = kSmallModel + "--steps 1 ";

TEST(BadInput, MissingIdxFiles) {
  fs::path dir = temp_dir("missing");
  expect_one_line_error(run_dlbench(kSmallTrain + "--data " + dir.string()), "not found");
}

TEST(BadInput, MissingDataDirectory) {
  expect_one_line_error(run_dlbench(kSmallTrain + "--data /nonexistent/fmnist"), "no such directory");
}

TEST(BadInput, TruncatedIdxFile) {
  fs::path dir = make_idx_dir("truncated");
  auto bytes = idx_images(2051, 64, 28, 28);
  bytes.resize(bytes.size() / 2);
  write_gz(dir / "train-images-idx3-ubyte.gz", bytes);
  expect_one_line_error(run_dlbench(kSmallTrain + "--data " + dir.string()), "train-images-idx3-ubyte.gz");
}

TEST(BadInput, CorruptedGzip) {
  fs::path dir = make_idx_dir("corrupt");
  std::vector<uint8_t> garbage{0x1f, 0x8b, 0x08, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x13, 0x37, 0x42, 0x99};
  write_raw(dir / "train-labels-idx1-ubyte.gz", garbage);
  expect_one_line_error(run_dlbench(kSmallTrain + "--data " + dir.string()), "train-labels-idx1-ubyte.gz");
}

TEST(BadInput, WrongMagicNumber) {
  fs::path dir = make_idx_dir("magic", /*image_magic=*/2049);
  expect_one_line_error(run_dlbench(kSmallTrain + "--data " + dir.string()), "magic");
}

TEST(BadInput, LabelOutOfRange) {
  fs::path dir = make_idx_dir("labels", 2051, /*max_label=*/12);
  expect_one_line_error(run_dlbench(kSmallTrain + "--data " + dir.string()), "label");
}

TEST(BadInput, UnknownModel) { expect_one_line_error(run_dlbench("bench --model resnet51"), "resnet51"); }

TEST(BadInput, UnknownPrecision) {
  expect_one_line_error(run_dlbench("bench --model resnet20 --precision fp8"), "fp8");
}

TEST(BadInput, HalfPrecisionOnCpu) {
  expect_one_line_error(run_dlbench("bench --model resnet20 --device cpu --precision fp16"), "fp32");
}

// A flag the parser refuses: one line with the same prefix as every other error, and exit code 2.
TEST(BadInput, UnknownFlagIsAParseError) {
  CommandResult r = run_dlbench("bench --modle resnet20");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("dlbench: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("--modle"), std::string::npos) << r.err;
}

// The CUDA backend's choices (backend/cuda_options.h, --comm-priority among them) are checked by the
// parser, before any work: one line and exit code 2, as for any bad flag.
void expect_parse_error(const CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
}

TEST(BadInput, UnknownKernelChoice) {
  expect_parse_error(run_dlbench("bench --model resnet20 --conv-graph sometimes"),
                     "--conv-graph sometimes: choose auto, off or force");
  expect_parse_error(run_dlbench("bench --model resnet20 --stem-pool-fusion maybe"),
                     "--stem-pool-fusion maybe: choose on or off");
  expect_parse_error(run_dlbench("bench --model gpt-mini --dense-epilogues yes"),
                     "--dense-epilogues yes: choose on or off");
  expect_parse_error(run_dlbench("bench --model gpt-mini --precision fp8 --fp8-fast-accumulation yes"),
                     "--fp8-fast-accumulation yes: choose off, forward or all");
}

TEST(BadInput, BatchSizeZeroOrNegative) {
  expect_one_line_error(run_dlbench("bench --model resnet20 --batch-size 0"), "--batch-size");
  expect_one_line_error(run_dlbench("bench --model resnet20 --batch-size -4"), "--batch-size");
}

TEST(BadInput, CollectiveTuningOutOfRange) {
  expect_parse_error(run_dlbench("bench --model resnet20 --comm-priority urgent"),
                     "--comm-priority urgent: choose normal or low");
  // high measured no faster and was removed.
  expect_parse_error(run_dlbench("bench --model resnet20 --comm-priority high"),
                     "--comm-priority high: choose normal or low");
  // Symmetric windows are NCCL's GPU memory: refused on the CPU, for training and for comm-bench alike.
  expect_one_line_error(run_dlbench("bench --model resnet20 --device cpu --nccl-symmetric"),
                        "--nccl-symmetric: NCCL windows are GPU memory");
  expect_one_line_error(run_dlbench("comm-bench --nccl-symmetric --max-bytes 1024"),
                        "--nccl-symmetric: the local communicator has no windows");
}

// Two outputs on one path: the later write would destroy the earlier (a trace overwritten by the result).
TEST(BadInput, TwoOutputsOnOneFile) {
  const std::string path = (temp_dir("two_outputs") / "out.json").string();
  const auto r = run_dlbench("bench --model resnet20 --steps 2 --trace " + path + " --json " + path);
  expect_one_line_error(r, "--json and --trace name the same file");
  EXPECT_FALSE(std::filesystem::exists(path)) << "nothing is written";
  expect_one_line_error(run_dlbench("train --model resnet20 --checkpoint ./a.ckpt --json a.ckpt"),
                        "--json and --checkpoint name the same file");
}

TEST(BadInput, TraceSummaryOfNoTrace) {
  expect_one_line_error(run_dlbench("trace-summary /nonexistent/trace.json"), "/nonexistent/trace.json");
}

// A cache file that cannot be written is refused before any work; one that is not a cache is ignored and
// rebuilt (tests/backend_tuning).
TEST(BadInput, AlgorithmCacheThatCannotBeWritten) {
  expect_one_line_error(
      run_dlbench("bench --model resnet20 --algorithm-cache /nonexistent/dir/algorithms.json"),
      "/nonexistent/dir/algorithms.json");
}

TEST(BadInput, ConflictingEpochsAndSteps) {
  expect_one_line_error(run_dlbench("train --model resnet20 --epochs 1 --steps 10"), "conflict");
}

TEST(BadInput, UnwritableJsonPath) {
  expect_one_line_error(run_dlbench("bench --model resnet20 --steps 1 --json /nonexistent/dir/out.json"),
                        "/nonexistent/dir/out.json");
}

TEST(BadInput, JsonPathIsADirectory) {
  fs::path dir = temp_dir("jsondir");
  expect_one_line_error(run_dlbench("bench --model resnet20 --steps 1 --json " + dir.string()), "directory");
}

TEST(BadInput, CheckpointOfAnotherModel) {
  fs::path dir = temp_dir("ckpt_model");
  std::string ckpt = (dir / "r18.ckpt").string();
  CommandResult made =
      run_dlbench("train --model resnet18 --batch-size 2 --steps 1 --threads 1 --checkpoint " + ckpt);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  expect_one_line_error(run_dlbench(kSmallModel + "--steps 2 --resume " + ckpt), "resnet18");
}

TEST(BadInput, CheckpointWithBadChecksum) {
  fs::path dir = temp_dir("ckpt_crc");
  std::string ckpt = (dir / "r20.ckpt").string();
  CommandResult made = run_dlbench(kSmallTrain + "--checkpoint " + ckpt);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  {
    std::fstream f(ckpt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(ckpt) / 2));
    char byte = 0;
    f.read(&byte, 1);
    f.seekp(static_cast<std::streamoff>(fs::file_size(ckpt) / 2));
    byte = static_cast<char>(byte ^ 0x5a);
    f.write(&byte, 1);
  }
  expect_one_line_error(run_dlbench(kSmallModel + "--steps 2 --resume " + ckpt), "checksum");
}

TEST(BadInput, FailedRunWritesNoJson) {
  fs::path dir = temp_dir("nojson");
  fs::path json = dir / "out.json";
  CommandResult r = run_dlbench(kSmallTrain + "--data " + dir.string() + " --json " + json.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(json));
  EXPECT_FALSE(fs::exists(json.string() + ".tmp"));
  for (const auto& entry : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << entry.path();
}

}  // namespace
}  // namespace dlbench::testing
