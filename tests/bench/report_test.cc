// The report from fixture results: the expected Markdown (a golden file), malformed lines named and
// skipped, a compiled peer apart from the eager one, memory, energy and losses in their tables, peers not
// installed listed with the failed points, empty input refused with one clear message, a token model in
// tokens/s beside an image model in img/s.
#include "bench/report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "bench/report_figures.h"
#include "core/status.h"
#include "temp_dir.h"

namespace dlbench {
namespace {

const std::string kFixtures = std::string(DLBENCH_SOURCE_DIR) + "/tests/bench/";

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Report, FixtureGivesTheGoldenMarkdown) {
  ::testing::internal::CaptureStderr();
  const ReportInput input = read_report_input({kFixtures + "fixtures/study_small.jsonl"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(input.points.size(), 9u);
  EXPECT_EQ(input.failed.size(), 2u);  // one failed, one unavailable
  EXPECT_EQ(input.skipped_lines, 2);
  EXPECT_NE(err.find("study_small.jsonl line 9: not a JSON object"), std::string::npos) << err;
  EXPECT_NE(err.find("line 10: has no \"images_per_second\""), std::string::npos) << err;
  const std::string markdown = report_markdown(input);
  const std::string golden_path = kFixtures + "golden/study_small.md";
  if (std::getenv("DLBENCH_UPDATE_GOLDEN")) {  // regenerate after a deliberate change, then read the diff
    std::ofstream(golden_path) << markdown;
  }
  EXPECT_EQ(markdown, read(golden_path)) << "set DLBENCH_UPDATE_GOLDEN=1 to rewrite " << golden_path;
}

TEST(Report, TablesHoldTheNumbersOfThePoints) {
  const std::string markdown = report_markdown(read_report_input({kFixtures + "fixtures/study_small.jsonl"}));
  // 1,980 / 1,000 on 2 GPUs: 1.98x, 99.0%; 13,800 / 7,000: 1.97x, 98.6%; PyTorch 12,000 / 6,600: 1.82x.
  EXPECT_NE(markdown.find("| dlbench | fp32 | 256 | 2 | 1.98x | 99.0% |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| dlbench | fp16 | 256 | 2 | 1.97x | 98.6% |"), std::string::npos);
  EXPECT_NE(markdown.find("| pytorch | fp16 | 256 | 2 | 1.82x | 90.9% |"), std::string::npos);
  // dlbench beside each peer: 13,800 / 12,000 on 2 GPUs, 1.15x, each one's efficiency; the model only
  // dlbench trained (resnet20) has no such section.
  EXPECT_NE(markdown.find("| pytorch | fp16 | 256 | 2 | 13,800 | 12,000 | 1.15x | 98.6% | 90.9% |"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| pytorch (compiled) | fp16 | 256 | 1 | 7,000 | 6,900 | 1.01x | - | - |"),
            std::string::npos);
  EXPECT_NE(markdown.find("## resnet50: dlbench against its peers"), std::string::npos);
  EXPECT_EQ(markdown.find("## resnet20: dlbench against its peers"), std::string::npos);
  EXPECT_NE(markdown.find("| dlbench | 256 | 1 | +600% | - |"), std::string::npos);  // 7,000 / 1,000
  EXPECT_NE(markdown.find("**large spread**"), std::string::npos);                   // the 8.1% jitter point
  EXPECT_NE(markdown.find("NCCL: unhandled system error"), std::string::npos);       // the failed sweep point
  EXPECT_NE(markdown.find("dlbench (fp32) scales best, at 99.0% efficiency"), std::string::npos);
  // torch.compile is its own row, never the best of eager and compiled.
  EXPECT_NE(markdown.find("| pytorch (compiled) | fp16 | 256 | 6,900 | - |"), std::string::npos);
  EXPECT_NE(markdown.find("| pytorch | fp16 | 256 | 6,600 | 12,000 |"), std::string::npos);
  // Start-up: the result's seconds to its first timed step, "—" where it has none.
  EXPECT_NE(markdown.find("| 1965 | 85% | 19.0 |"), std::string::npos) << markdown;
  // Peak memory and energy: "—" where the result has no energy figure.
  EXPECT_NE(markdown.find("| dlbench | resnet50 | fp16 | 1 | 256 | 7,000 | 11.2 GiB | 0.086 |"),
            std::string::npos);
  EXPECT_NE(markdown.find("| dlbench | resnet50 | fp32 | 1 | 256 | 1,000 | 21.5 GiB | — |"),
            std::string::npos);
  // A point another framework measured and this one did not is named.
  EXPECT_NE(markdown.find("- pytorch resnet50 fp32 on 2 GPUs: not measured (another framework was)"),
            std::string::npos);
  // The training run's losses, and the peer that is not installed.
  EXPECT_NE(markdown.find("| dlbench | resnet20 | fp32 | 1 | 128 | 30 | 2.3412 | 0.7260 | 0.7260 |"),
            std::string::npos);
  EXPECT_NE(
      markdown.find("- jax resnet50 fp16 1 GPU batch 256 (local): not available: the JAX peer cannot start"),
      std::string::npos);
}

TEST(Report, PointsJsonlHasSpeedupEfficiencyAndThePeersBeside) {
  const std::string jsonl =
      report_points_jsonl(read_report_input({kFixtures + "fixtures/study_small.jsonl"}));
  std::istringstream lines(jsonl);
  int found = 0;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    for (const char* key : {"model", "precision", "ranks", "launcher", "images_per_second", "speedup",
                            "scaling_efficiency", "peers"})
      EXPECT_TRUE(j.contains(key)) << key << " in " << line;
    if (j["framework"] == "dlbench" && j["precision"] == "fp16" && j["ranks"] == 2) {
      ++found;
      // 13,800 / 7,000 on 2 GPUs; PyTorch DDP 12,000 beside it.
      EXPECT_NEAR(j["speedup"].get<double>(), 13800.0 / 7000.0, 1e-9);
      EXPECT_NEAR(j["scaling_efficiency"].get<double>(), 13800.0 / 7000.0 / 2, 1e-9);
      EXPECT_EQ(j["peers"]["pytorch"]["images_per_second"], 12000.0);
      EXPECT_NEAR(j["peers"]["pytorch"]["ratio"].get<double>(), 13800.0 / 12000.0, 1e-9);
      EXPECT_FALSE(j["peers"].contains("pytorch (compiled)"));  // it has no 2-GPU point
    }
    if (j["framework"] == "pytorch (compiled)") {
      ++found;
      EXPECT_NEAR(j["peers"]["dlbench"]["ratio"].get<double>(), 6900.0 / 7000.0, 1e-9);
    }
  }
  EXPECT_EQ(found, 2) << jsonl;
}

TEST(Report, AFailureRunAgainSuccessfullyIsNotListed) {
  using testing::TempDir;
  using testing::write_file;
  TempDir dir;
  const std::string path = dir.file("retried.jsonl");
  write_file(
      path,
      R"({"sweep_point": {"framework": "pytorch", "model": "resnet50", "precision": "fp32", "gpus": 1, )"
      R"("batch_size": 256, "launcher": "torchrun"}, "status": "failed", "error": "timed out after 60 s"})"
      "\n"
      R"({"sweep_point": {"model": "resnet50", "precision": "fp16", "gpus": 1, "batch_size": 256, )"
      R"("launcher": "threads"}, "status": "failed", "error": "still broken"})"
      "\n"
      R"({"sweep_point": {"framework": "pytorch", "model": "resnet50", "precision": "fp32", "gpus": 1, )"
      R"("batch_size": 256, "launcher": "torchrun"}, "status": "ok", "result": {"framework": "pytorch", )"
      R"("model": "resnet50", "precision": "fp32", "images_per_second": 1000.0}})"
      "\n");
  const ReportInput input = read_report_input({path});
  ASSERT_EQ(input.failed.size(), 1u);
  EXPECT_CONTAINS(input.failed[0], "still broken");
  EXPECT_EQ(input.failed_then_ok, 1);
  EXPECT_CONTAINS(report_markdown(input), "1 more point(s) failed once and succeeded when run again");
}

// Two runs of one sweep point, the second with extra bench flags (sweep --bench-args): the per-point
// tables and points.jsonl tell them apart.
TEST(Report, PointsRunWithBenchArgsAreNamed) {
  testing::TempDir dir;
  const std::string path = dir.file("table.jsonl");
  auto line = [](const std::string& extra, double rate) {
    return fmt::format(R"({{"sweep_point": {{"model": "resnet50", "precision": "fp16", "gpus": 2, )"
                       R"("batch_size": 256, "launcher": "threads"{}}}, "status": "ok", "result": )"
                       R"({{"model": "resnet50", "precision": "fp16", "ranks": 2, )"
                       R"("launcher": "nccl-threads", "batch_size": 256, "images_per_second": {}}}}})",
                       extra, rate) +
           "\n";
  };
  testing::write_file(path, line("", 14800) + line(R"(, "bench_args": ["--bucket-mb", "0"])", 14880));
  const ReportInput input = read_report_input({path});
  ASSERT_EQ(input.points.size(), 2u);
  EXPECT_EQ(input.points[0].bench_args, "");
  EXPECT_EQ(input.points[1].bench_args, "--bucket-mb 0");
  const std::string md = report_markdown(input);
  EXPECT_CONTAINS(md, "| dlbench (nccl-threads) | resnet50 | fp16 | 2 | 256 | 14,800 |");
  EXPECT_CONTAINS(md, "| dlbench (nccl-threads; --bucket-mb 0) | resnet50 | fp16 | 2 | 256 | 14,880 |");
  EXPECT_CONTAINS(report_points_jsonl(input), R"("bench_args":"--bucket-mb 0")");
}

TEST(Report, StatisticsAResultDoesNotStateComeFromItsStepTimes) {
  testing::TempDir dir;
  const std::string path = dir.file("peer.json");
  // A peer's result: median, p5 and p95 given, no confidence interval and no jitter.
  testing::write_file(path,
                      R"({"framework": "pytorch", "model": "resnet50", "precision": "fp16", )"
                      R"("images_per_second": 5000.0, "step_ms": {"median": 13.5, "p5": 10.3, "p95": 15.7}, )"
                      R"("step_times_ms": [10, 12, 14, 16]})");
  const ReportInput input = read_report_input({path});
  ASSERT_EQ(input.points.size(), 1u);
  const ReportPoint& p = input.points[0];
  EXPECT_EQ(*p.step_median_ms, 13.5);  // stated: kept
  // Mean 13, sample standard deviation sqrt(20/3) = 2.582; the 95% CI half-width t(0.975, 3) = 3.182 x
  // 2.582 / sqrt(4) = 4.108; jitter 2.582 / 13 = 0.1986.
  EXPECT_NEAR(*p.step_mean_ms, 13.0, 1e-9);
  EXPECT_NEAR(*p.step_ci95_ms, 4.108, 2e-3);
  EXPECT_NEAR(*p.jitter, 0.1986, 1e-4);
}

TEST(Report, ASpeedupBetweenRunsOfOtherAlgorithmsIsNamed) {
  testing::TempDir dir;
  const std::string path = dir.file("points.jsonl");
  auto line = [](int gpus, double rate, const std::string& precision, const std::string& digest) {
    return fmt::format(R"({{"model": "resnet50", "precision": "{}", "ranks": {}, "images_per_second": {}, )"
                       R"("algorithm_digest": "{}"}})",
                       precision, gpus, rate, digest) +
           "\n";
  };
  testing::write_file(path, line(1, 1000, "fp32", "aaaa") + line(2, 2000, "fp32", "bbbb") +
                                line(1, 7000, "fp16", "cccc") + line(2, 13900, "fp16", "cccc"));
  const ReportInput input = read_report_input({path});
  const std::string md = report_markdown(input);
  EXPECT_NE(
      md.find("dlbench fp32 on 2 GPUs ran other convolution algorithms than on one GPU (algorithm digest "
              "bbbb against aaaa)"),
      std::string::npos)
      << md;
  EXPECT_EQ(md.find("dlbench fp16 on 2 GPUs ran other"), std::string::npos) << md;
  EXPECT_NE(report_points_jsonl(input).find(R"("algorithm_digest":"bbbb")"), std::string::npos);
}

TEST(Report, StepTimesLossesAndEnergyAreRead) {
  const ReportInput input = read_report_input({kFixtures + "fixtures/study_small.jsonl"});
  size_t with_steps = 0, with_losses = 0, with_energy = 0, compiled = 0;
  for (const ReportPoint& p : input.points) {
    with_steps += !p.step_times_ms.empty();
    with_losses += !p.losses.empty();
    with_energy += p.energy_joules_per_item.has_value();
    compiled += p.compiled;
  }
  EXPECT_EQ(with_steps, 2u);
  EXPECT_EQ(with_losses, 1u);
  EXPECT_EQ(with_energy, 1u);
  EXPECT_EQ(compiled, 1u);
}

TEST(Report, EmptyInputIsOneClearError) {
  const std::string empty = ::testing::TempDir() + "/empty.jsonl";
  std::ofstream(empty).flush();
  try {
    run_report({empty}, ::testing::TempDir() + "/report-out");
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no result in"), std::string::npos) << e.what();
  }
}

// Ratios pair points of one run: given two files, a row takes dlbench's and the peer's points (and the
// one-GPU points of the efficiencies) from the file that holds both, even where another file has a faster
// dlbench point; where no file holds both, the best points of different files, marked.
TEST(Report, PeerRatiosPairPointsOfOneRun) {
  testing::TempDir dir;
  auto line = [](const std::string& framework, const std::string& precision, int gpus, double rate) {
    return fmt::format(R"({{"framework": "{}", "model": "resnet50", "precision": "{}", "ranks": {}, )"
                       R"("images_per_second": {}}})",
                       framework, precision, gpus, rate) +
           "\n";
  };
  const std::string a = dir.file("a.jsonl"), b = dir.file("b.jsonl");
  // a: dlbench alone, faster (fp32), and a pytorch fp16 point without dlbench beside it.
  testing::write_file(a, line("dlbench", "fp32", 1, 1500) + line("dlbench", "fp32", 2, 2990) +
                             line("pytorch", "fp16", 1, 5000));
  // b: both frameworks in fp32; dlbench in fp16 only.
  testing::write_file(b, line("dlbench", "fp32", 1, 1400) + line("dlbench", "fp32", 2, 2700) +
                             line("pytorch", "fp32", 1, 1000) + line("pytorch", "fp32", 2, 1900) +
                             line("dlbench", "fp16", 1, 8000));
  const std::string md = report_markdown(read_report_input({a, b}));
  EXPECT_CONTAINS(md, "| pytorch | fp32 | 0 | 1 | 1,400 | 1,000 | 1.40x | - | - |");
  EXPECT_CONTAINS(md, "| pytorch | fp32 | 0 | 2 | 2,700 | 1,900 | 1.42x | 96.4% | 95.0% |");
  EXPECT_CONTAINS(md, "| pytorch | fp16 | 0 | 1 | 8,000 | 5,000 | 1.60x (different runs) | - | - |");
  // The throughput table still shows each framework's best point.
  EXPECT_CONTAINS(md, "| dlbench | fp32 | 0 | 1,500 | 2,990 |");
  // The conclusions' ratios pair the same points.
  EXPECT_CONTAINS(md, "resnet50 fp32 on 1 GPU: dlbench is 1.40x as fast as pytorch.");
  EXPECT_CONTAINS(md,
                  "resnet50 fp16 on 1 GPU: dlbench is 1.60x as fast as pytorch (best points of "
                  "different runs).");
  // points.jsonl: b's dlbench fp32 point beside b's pytorch point (same run), its speedup over b's one-GPU
  // point; a's beside b's pytorch (no pytorch fp32 in a), marked.
  int checked = 0;
  std::istringstream lines(report_points_jsonl(read_report_input({a, b})));
  for (std::string text; std::getline(lines, text);) {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j["framework"] != "dlbench" || j["precision"] != "fp32" || j["ranks"] != 2) continue;
    const nlohmann::json& peer = j["peers"]["pytorch"];
    EXPECT_EQ(peer["images_per_second"], 1900.0);
    if (j["images_per_second"] == 2700.0) {
      EXPECT_TRUE(peer["same_run"].get<bool>());
      EXPECT_NEAR(j["speedup"].get<double>(), 2700.0 / 1400.0, 1e-9);
    } else {
      EXPECT_FALSE(peer["same_run"].get<bool>());
      EXPECT_NEAR(j["speedup"].get<double>(), 2990.0 / 1500.0, 1e-9);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// A speedup whose best points on one GPU and on several come from different files says so.
TEST(Report, ASpeedupAcrossRunsIsNamed) {
  testing::TempDir dir;
  auto line = [](int gpus, double rate) {
    return fmt::format(
               R"({{"model": "resnet50", "precision": "fp16", "ranks": {}, "images_per_second": {}}})", gpus,
               rate) +
           "\n";
  };
  const std::string a = dir.file("a.jsonl"), b = dir.file("b.jsonl");
  testing::write_file(a, line(1, 8000));
  testing::write_file(b, line(1, 7900) + line(2, 15500));
  EXPECT_CONTAINS(report_markdown(read_report_input({a, b})),
                  "dlbench fp16 on 2 GPUs: the best points on one GPU and on 2 come from different runs "
                  "(a.jsonl and b.jsonl).");
  EXPECT_EQ(report_markdown(read_report_input({b})).find("different runs"), std::string::npos);
}

// One run (one file) of an image model and a token model, each by dlbench and by the PyTorch peer:
// dlbench's results as `bench --json` writes them (a GPT model's images_per_second counts sequences of
// 1,024 tokens, its energy is per sequence), the peers' as their scripts do (peers/pytorch/gpt.py states
// the energy per token).
std::string image_and_token_points() {
  return R"({"config": {"command": "bench", "seq_len": 0}, "model": "resnet50", "precision": "bf16", )"
         R"("ranks": 1, "batch_size": 256, "launcher": "single", "images_per_second": 3000.0, )"
         R"("peak_memory_bytes": 32212254720, )"
         R"("warmup_steps": 2, "energy_joules": 600.0, "energy_joules_per_image": 0.2, )"
         R"("average_power_watts": 600.0})"
         "\n"
         R"({"framework": "pytorch", "model": "resnet50", "precision": "bf16", "batch_size": 256, )"
         R"("images_per_second": 2500.0})"
         "\n"
         R"({"config": {"command": "bench", "seq_len": 1024}, "model": "gpt2", "precision": "bf16", )"
         R"("ranks": 1, "batch_size": 16, "launcher": "single", "images_per_second": 400.0, )"
         R"("peak_memory_bytes": 21474836480, )"
         R"("sequences_per_second": 400.0, "tokens_per_second": 409600.0, )"
         R"("tokens_per_second_per_device": 409600.0, "model_flops_per_token": 8.5e8, "mfu": 0.41, )"
         R"("mfu_peak_tflops": 989.0, "warmup_steps": 2, "energy_joules": 700.0, )"
         R"("energy_joules_per_image": 1.792, "average_power_watts": 700.0})"
         "\n"
         R"({"framework": "pytorch", "model": "gpt2", "precision": "bf16", "batch_size": 16, )"
         R"("seq_len": 1024, )"
         R"("sequences_per_second": 320.0, "images_per_second": 320.0, "tokens_per_second": 327680.0, )"
         R"("tokens_per_second_per_device": 327680.0, "energy_joules_per_token": 0.0021})"
         "\n";
}

// The machine is described from a dlbench result whatever ran it: a CPU run is "dlbench (CPU)" in the
// tables, and its system still heads the report (a CPU study's report said no result carried one).
TEST(Report, ACpuRunsSystemHeadsTheReport) {
  testing::TempDir dir;
  const std::string path = dir.file("cpu.jsonl");
  testing::write_file(
      path,
      R"({"config": {"command": "bench", "device": "cpu"}, "device": "cpu", "model": "resnet20", )"
      R"("precision": "fp32", "ranks": 1, "batch_size": 128, "launcher": "single", "images_per_second": 1169.0, )"
      R"("system": {"dlbench_version": "9.9.9", "git_commit": "abc1234", "hostname": "testhost", )"
      R"("os": "Debian 12", "cpu": "Test CPU", "logical_cores": 2, "memory_bytes": 25769803776}})"
      "\n");
  const std::string md = report_markdown(read_report_input({path}));
  EXPECT_CONTAINS(md, "| dlbench (CPU) | fp32 | 128 | 1,169 |");
  EXPECT_CONTAINS(md, "dlbench    9.9.9 (commit abc1234)");
  EXPECT_CONTAINS(md, "host       testhost, Debian 12");
  EXPECT_EQ(md.find("No result carries a system description."), std::string::npos) << md;
}

// Each framework at the batch it ran fastest at: dlbench fastest at 64 (which the peer did not fit), the
// peer at 32. The same-batch table pairs 16 with 16 and 32 with 32; the best-batch table pairs 64 with 32,
// with both memories beside, and the conclusions say so. A precision where both ran one and the same batch
// has no best-batch row (the same-batch table holds it); one where each ran another batch has.
TEST(Report, EachFrameworksFastestBatchIsSetBesideTheOthers) {
  testing::TempDir dir;
  auto line = [](const std::string& framework, const std::string& precision, int batch, double tokens,
                 double gib) {
    return fmt::format(
               R"({{"framework": "{}", "model": "gpt2-large", "precision": "{}", "ranks": 1, )"
               R"("batch_size": {}, "seq_len": 1024, "images_per_second": {}, "tokens_per_second": {}, )"
               R"("peak_memory_bytes": {}}})",
               framework, precision, batch, tokens / 1024, tokens, gib * double(1 << 30)) +
           "\n";
  };
  const std::string path = dir.file("batches.jsonl"), other = dir.file("other.jsonl");
  testing::write_file(path,
                      line("dlbench", "bf16", 16, 98000, 36) + line("dlbench", "bf16", 32, 100000, 60) +
                          line("dlbench", "bf16", 64, 104000, 108) + line("pytorch", "bf16", 16, 88000, 38) +
                          line("pytorch", "bf16", 32, 91000, 64) + line("dlbench", "fp16", 16, 97000, 36) +
                          line("pytorch", "fp16", 16, 80000, 38));
  const std::string md = report_markdown(read_report_input({path}));
  EXPECT_CONTAINS(md, "## gpt2-large: dlbench against its peers, each at its fastest batch");
  EXPECT_CONTAINS(md, "| pytorch | bf16 | 1 | 64 | 104,000 | 108.0 GiB | 32 | 91,000 | 64.0 GiB | 1.14x |");
  EXPECT_CONTAINS(md,
                  "gpt2-large bf16 on 1 GPU, each at its fastest batch: dlbench (batch 64) is 1.14x as fast "
                  "as pytorch (batch 32).");
  // The same-batch comparisons stand as before.
  EXPECT_CONTAINS(md, "| pytorch | bf16 | 32 | 1 | 100,000 | 91,000 | 1.10x | - | - |");
  EXPECT_EQ(md.find("| pytorch | fp16 | 1 | 16 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("each at its fastest batch: dlbench (batch 16)"), std::string::npos) << md;

  // One batch each, a different one, in two files: a best-batch row, marked as pairing two runs.
  testing::write_file(other, line("pytorch", "fp16", 8, 75000, 20));
  const std::string alone = dir.file("alone.jsonl");
  testing::write_file(alone, line("dlbench", "fp16", 16, 97000, 36));
  const std::string md2 = report_markdown(read_report_input({alone, other}));
  EXPECT_CONTAINS(
      md2,
      "| pytorch | fp16 | 1 | 16 | 97,000 | 36.0 GiB | 8 | 75,000 | 20.0 GiB | 1.29x (different runs) |");
  // Nothing to choose: both ran batch 16 only, no best-batch section.
  const std::string same = dir.file("same.jsonl");
  testing::write_file(same, line("dlbench", "fp16", 16, 97000, 36) + line("pytorch", "fp16", 16, 80000, 38));
  EXPECT_EQ(report_markdown(read_report_input({same})).find("each at its fastest batch"), std::string::npos);

  // Both fastest at one batch of the several they ran: the conclusions give that ratio once, as the
  // best-batch line; the other batch keeps its per-batch line.
  const std::string both64 = dir.file("both64.jsonl");
  testing::write_file(both64,
                      line("dlbench", "bf16", 32, 100000, 60) + line("dlbench", "bf16", 64, 104000, 108) +
                          line("pytorch", "bf16", 32, 91000, 64) + line("pytorch", "bf16", 64, 92000, 120));
  const std::string md3 = report_markdown(read_report_input({both64}));
  EXPECT_CONTAINS(md3,
                  "gpt2-large bf16 on 1 GPU, each at its fastest batch: dlbench (batch 64) is 1.13x as fast "
                  "as pytorch (batch 64).");
  EXPECT_EQ(md3.find("gpt2-large bf16 on 1 GPU at batch 64: dlbench is"), std::string::npos) << md3;
  EXPECT_CONTAINS(md3, "gpt2-large bf16 on 1 GPU at batch 32: dlbench is 1.10x as fast as pytorch.");
}

// A token model's rows and figures state its tokens/s (not its sequences/s) and its MFU, an image model's
// its img/s; the ratios divide like by like.
TEST(Report, ATokenModelIsReportedInTokensPerSecond) {
  testing::TempDir dir;
  const std::string path = dir.file("mixed.jsonl");
  testing::write_file(path, image_and_token_points());
  const ReportInput input = read_report_input({path});
  ASSERT_EQ(input.points.size(), 4u);
  EXPECT_EQ(input.skipped_lines, 0);
  const std::string md = report_markdown(input);
  // Each model's sections in its own unit.
  EXPECT_CONTAINS(md, "## resnet50: throughput (images/s, all GPUs together)");
  EXPECT_CONTAINS(md, "## gpt2: throughput (tokens/s, all GPUs together)");
  EXPECT_CONTAINS(md, "| dlbench | bf16 | 16 | 409,600 |");
  EXPECT_CONTAINS(md, "| pytorch | bf16 | 16 | 327,680 |");
  EXPECT_CONTAINS(md, "| dlbench | bf16 | 256 | 3,000 |");
  // dlbench beside the peer: 409,600 / 327,680 tokens/s = 1.25x (the sequences/s give the same ratio only
  // at one sequence length); 3,000 / 2,500 images/s = 1.20x.
  EXPECT_CONTAINS(md, "| dlbench tok/s | peer tok/s |");
  EXPECT_CONTAINS(md, "| pytorch | bf16 | 16 | 1 | 409,600 | 327,680 | 1.25x | - | - |");
  EXPECT_CONTAINS(md, "| dlbench img/s | peer img/s |");
  EXPECT_CONTAINS(md, "| pytorch | bf16 | 256 | 1 | 3,000 | 2,500 | 1.20x | - | - |");
  EXPECT_CONTAINS(md, "gpt2 bf16 on 1 GPU: dlbench is 1.25x as fast as pytorch.");
  // The per-point tables mix the models: the unit in each cell, the MFU where a point states it.
  EXPECT_CONTAINS(md, "| throughput | MFU | median ms |");
  EXPECT_CONTAINS(md, "| dlbench | gpt2 | bf16 | 1 | 16 | 409,600 tok/s | 41.0% |");
  EXPECT_CONTAINS(md, "| pytorch | gpt2 | bf16 | 1 | 16 | 327,680 tok/s |  |");
  EXPECT_CONTAINS(md, "| dlbench | resnet50 | bf16 | 1 | 256 | 3,000 img/s |  |");
  EXPECT_EQ(md.find("| 400 |"), std::string::npos) << md;  // never the sequences/s
  EXPECT_EQ(md.find(" 400 tok/s"), std::string::npos) << md;
  // Energy per token: dlbench's 1.792 J per sequence of 1,024 tokens is 1.75 mJ per token.
  EXPECT_CONTAINS(md, "## Peak memory, energy per image or token, clocks and start-up");
  EXPECT_CONTAINS(md, "| 409,600 tok/s | 20.0 GiB | 0.00175 J/token |");
  EXPECT_CONTAINS(md, "| 3,000 img/s | 30.0 GiB | 0.200 J/img |");
}

TEST(Report, PointsJsonlCarriesATokenModelsTokensPerSecond) {
  testing::TempDir dir;
  const std::string path = dir.file("mixed.jsonl");
  testing::write_file(path, image_and_token_points());
  std::istringstream lines(report_points_jsonl(read_report_input({path})));
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["framework"] != "dlbench") continue;
    ++checked;
    if (j["model"] == "gpt2") {
      EXPECT_EQ(j["tokens_per_second"], 409600.0);
      EXPECT_EQ(j["images_per_second"], 400.0);  // sequences/s, as the result states it
      EXPECT_EQ(j["mfu"], 0.41);
      EXPECT_NEAR(j["energy_joules_per_token"].get<double>(), 1.792 / 1024, 1e-12);
      EXPECT_FALSE(j.contains("energy_joules_per_image")) << line;
      EXPECT_EQ(j["peers"]["pytorch"]["tokens_per_second"], 327680.0);
      EXPECT_NEAR(j["peers"]["pytorch"]["ratio"].get<double>(), 409600.0 / 327680.0, 1e-12);
      EXPECT_FALSE(j["peers"].contains("pytorch (compiled)"));
    } else {
      EXPECT_FALSE(j.contains("tokens_per_second")) << line;
      EXPECT_FALSE(j.contains("mfu")) << line;
      EXPECT_EQ(j["energy_joules_per_image"], 0.2);
      EXPECT_NEAR(j["peers"]["pytorch"]["ratio"].get<double>(), 3000.0 / 2500.0, 1e-12);
      EXPECT_FALSE(j["peers"]["pytorch"].contains("tokens_per_second")) << line;
    }
  }
  EXPECT_EQ(checked, 2);
}

TEST(Report, ATokenModelsFiguresCountTokens) {
  testing::TempDir dir;
  const std::string path = dir.file("mixed.jsonl");
  testing::write_file(path, image_and_token_points());
  int checked = 0;
  for (const ReportFigure& f : plan_figures(read_report_input({path}))) {
    if (f.name == "throughput_gpt2_bf16") {
      ++checked;
      EXPECT_CONTAINS(f.title, "gpt2 bf16: tokens/s on each GPU count");
      EXPECT_CONTAINS(f.script, "set ylabel 'tokens/s (all GPUs together)'");
      EXPECT_CONTAINS(f.data, " 409600 ");
      EXPECT_CONTAINS(f.data, " 327680 ");
    }
    if (f.name == "throughput_resnet50_bf16") {
      ++checked;
      EXPECT_CONTAINS(f.script, "set ylabel 'images/s (all GPUs together)'");
      EXPECT_CONTAINS(f.data, " 3000 ");
    }
  }
  EXPECT_EQ(checked, 2);
}

// A GPT point at another sequence length than the model's context is another workload: its own rows,
// never a ratio against the full-context points.
TEST(Report, ATokenModelAtAnotherSequenceLengthIsAModelOfItsOwn) {
  testing::TempDir dir;
  const std::string path = dir.file("lengths.jsonl");
  testing::write_file(
      path, image_and_token_points() +
                R"({"config": {"command": "bench", "seq_len": 256}, "model": "gpt2", "precision": "bf16", )"
                R"("ranks": 1, "batch_size": 16, "launcher": "single", "images_per_second": 2000.0, )"
                R"("sequences_per_second": 2000.0, "tokens_per_second": 512000.0, )"
                R"("tokens_per_second_per_device": 512000.0})"
                "\n");
  const ReportInput input = read_report_input({path});
  ASSERT_EQ(input.points.size(), 5u);
  EXPECT_EQ(input.points[4].model, "gpt2 (seq 256)");
  EXPECT_EQ(input.points[4].seq_len, 256);
  EXPECT_EQ(input.points[2].model, "gpt2");  // at its context, 1024: the model's own name
  EXPECT_EQ(input.points[4].unit, RateUnit::tokens);
  const std::string md = report_markdown(input);
  EXPECT_CONTAINS(md, "## gpt2 (seq 256): throughput (tokens/s, all GPUs together)");
  EXPECT_CONTAINS(md, "| dlbench | gpt2 (seq 256) | bf16 | 1 | 16 | 512,000 tok/s |");
  // The full-context ratio against the peer is untouched by the shorter point's higher rate.
  EXPECT_CONTAINS(md, "gpt2 bf16 on 1 GPU: dlbench is 1.25x as fast as pytorch.");
  std::istringstream lines(report_points_jsonl(input));
  int with_length = 0;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("seq_len")) continue;
    ++with_length;
    EXPECT_TRUE(j["seq_len"] == 256 || j["seq_len"] == 1024) << line;
  }
  EXPECT_EQ(with_length, 3);
}

// A token model's point is its tokens/s: one without a usable tokens_per_second (absent, null, impossible)
// is named and skipped as one without images_per_second is.
TEST(Report, ATokenModelWithoutTokensPerSecondIsSkipped) {
  testing::TempDir dir;
  const std::string path = dir.file("gpt.jsonl");
  testing::write_file(
      path,
      R"({"framework": "pytorch", "model": "gpt2", "precision": "bf16", "images_per_second": 320.0})"
      "\n"
      R"({"config": {"command": "bench"}, "model": "gpt-mini", "precision": "fp32", )"
      R"("images_per_second": 4.0, )"
      R"("tokens_per_second": null})"
      "\n"
      R"({"model": "gpt2-medium", "precision": "fp16", "images_per_second": 100.0, "tokens_per_second": -5})"
      "\n"
      R"({"model": "resnet50", "precision": "fp16", "images_per_second": 7000.0})"
      "\n");
  ::testing::internal::CaptureStderr();
  const ReportInput input = read_report_input({path});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(input.points.size(), 1u);  // the image model needs no tokens/s
  EXPECT_EQ(input.points[0].model, "resnet50");
  EXPECT_EQ(input.skipped_lines, 3);
  EXPECT_EQ(err, "report: " + path + " line 1: has no \"tokens_per_second\"; skipped\n" + "report: " + path +
                     " line 2: has no \"tokens_per_second\"; skipped\n" + "report: " + path +
                     " line 3: its \"tokens_per_second\" is -5: not a possible rate; skipped\n");
}

}  // namespace
}  // namespace dlbench
