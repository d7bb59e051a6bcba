// --decode through the dlbench binary on the CPU (CI: no GPU, no nvJPEG): gpu is refused with one line
// wherever it is asked for, an unknown value too, and auto trains exactly as cpu, saying nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/tiny_data.h"
#include "cli_util.h"

namespace dlbench::testing {
namespace {

namespace fs = std::filesystem;

// A tiny JPEG folder (64 training, 16 evaluation images of 28x28), exported from an IDX set.
fs::path make_jpeg_folder(const std::string& name) {
  const fs::path idx = make_idx_dir(name + "_idx");
  const fs::path jpeg = temp_dir(name) / "jpeg";
  const CommandResult exported = run_dlbench("export-images " + jpeg.string() + " --data " + idx.string());
  EXPECT_EQ(exported.exit_code, 0) << exported.err;
  fs::remove_all(idx);
  return jpeg;
}

TEST(DecodeCli, GpuIsRefusedWithOneLineWhereItCannotBeHad) {
  const fs::path jpeg = make_jpeg_folder("decode_gpu");
  const std::string train =
      "train --device cpu --model resnet20 --batch-size 8 --steps 1 --data " + jpeg.string();
  expect_one_line_error(run_dlbench(train + " --decode gpu"), "--decode gpu: the device is the CPU");
  expect_one_line_error(
      run_dlbench("data-bench --batch-size 8 --batches 1 --decode gpu --data " + jpeg.string()),
      "--decode gpu:");
  expect_one_line_error(run_dlbench("bench --device cpu --model resnet20 --steps 1 --decode gpu"),
                        "--decode gpu: --data synthetic holds no JPEGs to decode");
  expect_one_line_error(run_dlbench(train + " --decode sideways"),
                        "--decode sideways: unknown; choose auto, cpu or gpu");
  expect_one_line_error(run_dlbench("sweep --results " + (jpeg.parent_path() / "r.jsonl").string() +
                                    " --device cpu --decode sideways"),
                        "--decode sideways: unknown");
  fs::remove_all(jpeg.parent_path());
}

TEST(DecodeCli, AutoTrainsExactlyAsCpuAndSaysNothingOnTheCpu) {
  const fs::path jpeg = make_jpeg_folder("decode_auto");
  nlohmann::json results[2];
  int k = 0;
  for (const char* mode : {"auto", "cpu"}) {
    const fs::path json = jpeg.parent_path() / (std::string(mode) + ".json");
    const CommandResult r = run_dlbench(
        "train --device cpu --model resnet20 --batch-size 8 --steps 3 --threads 2 --data-threads 1 "
        "--decode " +
        std::string(mode) + " --data " + jpeg.string() + " --json " + json.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find("nvJPEG"), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find("nvJPEG"), std::string::npos) << r.err;
    results[k++] = nlohmann::json::parse(read_text(json.string()));
  }
  for (const nlohmann::json& j : results) {
    EXPECT_EQ(j["decode"], "cpu");
    EXPECT_EQ(j["config"]["decode"], "cpu");
    // 3 steps of 8 and the 16 evaluation images, every one by libjpeg-turbo.
    EXPECT_GE(j["images_decoded_on_cpu"].get<double>(), 3 * 8 + 16);
  }
  EXPECT_EQ(results[0]["losses"].get<std::vector<double>>(), results[1]["losses"].get<std::vector<double>>());
  EXPECT_EQ(results[0]["images_decoded_on_cpu"], results[1]["images_decoded_on_cpu"]);
  fs::remove_all(jpeg.parent_path());
}

}  // namespace
}  // namespace dlbench::testing
