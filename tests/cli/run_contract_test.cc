// The contract of `train` and `bench` with the user's files and flags, through the real binary: no output
// overwrites an input or another output; a resumed run continues the stopped one exactly or says why not;
// numeric flags are bounded by what the machine allows; a figure that was not measured is not reported;
// a stop by SIGINT/SIGTERM saves first, says where it stopped and leaves nothing half-written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/result.h"
#include "cli/tiny_data.h"
#include "cli_util.h"
#include "core/file_io.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

// A tiny resnet20 run on a 64-image IDX set: 8 steps an epoch at batch 8.
std::string tiny_train(const fs::path& data) {
  return "train --model resnet20 --batch-size 8 --threads 1 --lr 0.05 --data " + data.string() + " ";
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_text(path.string())); }

// A checkpoint of 2 steps of tiny_train.
fs::path make_checkpoint(const fs::path& dir, const fs::path& data) {
  const fs::path ckpt = dir / "run.ckpt";
  const CommandResult r = run_dlbench(tiny_train(data) + "--steps 2 --checkpoint " + ckpt.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ckpt;
}

// ---- paths: an output never overwrites an input or another output ----

TEST(RunFiles, NoOutputMayNameTheCheckpointBeingResumed) {
  const fs::path data = make_idx_dir("resume_outputs"), dir = temp_dir("resume_outputs_run");
  const fs::path ckpt = make_checkpoint(dir, data);
  const std::string before = read_text(ckpt.string());
  for (const std::string flag : {"--json", "--trace", "--mlperf-log"}) {
    const CommandResult r = run_dlbench(tiny_train(data) + "--steps 4 --resume " + ckpt.string() + " " +
                                        flag + " " + ckpt.string());
    expect_one_line_error(r, flag + " and --resume name the same file");
    EXPECT_EQ(read_text(ckpt.string()), before) << flag << " touched the checkpoint";
  }
  // The same file by another name: a symbolic link, a hard link, a path through "..".
  fs::create_symlink(ckpt, dir / "link.ckpt");
  fs::create_hard_link(ckpt, dir / "hard.ckpt");
  fs::create_directories(dir / "sub");
  for (const fs::path& other : {dir / "link.ckpt", dir / "hard.ckpt", dir / "sub" / ".." / "run.ckpt"}) {
    const CommandResult r =
        run_dlbench(tiny_train(data) + "--steps 4 --resume " + ckpt.string() + " --json " + other.string());
    expect_one_line_error(r, "--json and --resume name the same file");
    EXPECT_EQ(read_text(ckpt.string()), before) << other;
  }
}

TEST(RunFiles, TwoOutputsOnOneFileAreRefused) {
  const fs::path dir = temp_dir("two_outputs_run");
  const std::string x = (dir / "x").string();
  expect_one_line_error(
      run_dlbench("train --model resnet20 --steps 1 --checkpoint " + x + " --mlperf-log " + x),
      "--checkpoint and --mlperf-log name the same file");
  expect_one_line_error(run_dlbench("train --model resnet20 --steps 1 --json " + x + " --mlperf-log " + x),
                        "--json and --mlperf-log name the same file");
  EXPECT_FALSE(fs::exists(x));
}

// Resuming and saving to the same checkpoint is how a run continues: allowed.
TEST(RunFiles, CheckpointMayContinueTheResumedFile) {
  const fs::path data = make_idx_dir("continue_same");
  const fs::path ckpt = make_checkpoint(temp_dir("continue_same_run"), data);
  const CommandResult r = run_dlbench(tiny_train(data) + "--steps 3 --resume " + ckpt.string() +
                                      " --checkpoint " + ckpt.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "resuming at step 2");
  EXPECT_CONTAINS(r.out, "checkpoint of step 3 saved to " + ckpt.string());
}

TEST(RunFiles, NoOutputInsideTheDataFolder) {
  const fs::path data = make_idx_dir("output_in_data");
  expect_one_line_error(run_dlbench(tiny_train(data) + "--steps 1 --json " + (data / "r.json").string()),
                        "lies inside --data");
  EXPECT_FALSE(fs::exists(data / "r.json"));
}

// The result goes through a temporary of its own: a file of the user's named like one is never touched.
TEST(RunFiles, TheUsersOwnTmpFileIsLeftAlone) {
  const fs::path dir = temp_dir("users_tmp");
  std::ofstream(dir / "r.json.tmp") << "mine\n";
  const CommandResult r = run_dlbench(
      "bench --model resnet20 --batch-size 4 --steps 1 --warmup-steps 0 --threads 1 "
      "--json " +
      (dir / "r.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_text((dir / "r.json.tmp").string()), "mine\n");
  EXPECT_TRUE(read_json(dir / "r.json").contains("images_per_second"));
  EXPECT_EQ(temporaries_in(dir), 0);
}

// An output path that holds a file of another kind than the flag writes is the user's slip (a
// `--checkpoint notes.txt`): refused before the run, the file untouched. A file of the flag's own kind, as a
// rerun leaves, and an empty one (mktemp's) are replaced.
TEST(RunFiles, AnOutputNeverReplacesAFileOfAnotherKind) {
  const fs::path dir = temp_dir("other_kind");
  const std::string notes = (dir / "notes.txt").string();
  const std::string mine = "my notes: {\"not\": \"a result\"}\n";
  const std::string tiny = "train --model resnet20 --batch-size 2 --steps 1 --threads 1 ";
  for (const std::string flag : {"--json", "--checkpoint", "--trace", "--mlperf-log", "--algorithm-cache"}) {
    std::ofstream(notes) << mine;
    expect_one_line_error(run_dlbench(tiny + flag + " " + notes),
                          flag + " " + notes + ": the file exists and is not");
    EXPECT_EQ(read_text(notes), mine) << flag;
  }
  // Another JSON object is not a trace; JSON Lines are not one JSON object.
  std::ofstream(notes) << "{\"a\": 1}\n";
  expect_one_line_error(run_dlbench(tiny + "--trace " + notes), "is not a trace");
  std::ofstream(notes) << "{\"a\": 1}\n{\"b\": 2}\n";
  expect_one_line_error(run_dlbench(tiny + "--json " + notes), "is not a JSON object");
  // The other commands' outputs (data-bench's: ImageDataCli).
  std::ofstream(notes) << mine;
  expect_one_line_error(run_dlbench("info --json " + notes), "--json " + notes + ": the file exists");
  expect_one_line_error(run_dlbench("sweep --results " + notes +
                                    " --models resnet20 --precisions fp32 --batch-sizes 2 --device cpu"),
                        "--results " + notes + ": the file exists and is not JSON Lines");
  EXPECT_EQ(read_text(notes), mine);

  // A rerun replaces its own outputs; an empty file is replaced too.
  const std::string json = (dir / "r.json").string(), ckpt = (dir / "r.ckpt").string(),
                    log = (dir / "r.log").string();
  std::ofstream(json).flush();
  for (int run = 0; run < 2; ++run) {
    const CommandResult r =
        run_dlbench(tiny + "--json " + json + " --checkpoint " + ckpt + " --mlperf-log " + log);
    ASSERT_EQ(r.exit_code, 0) << "run " << run << ": " << r.err;
  }
  EXPECT_TRUE(read_json(json).contains("images_per_second"));
}

// ---- resume: the checkpoint's settings must match, or --resume-anyway says so ----

TEST(Resume, ASettingThatDiffersIsRefusedNamingTheFlag) {
  const fs::path data = make_idx_dir("resume_settings");
  const fs::path ckpt = make_checkpoint(temp_dir("resume_settings_run"), data);
  const std::string resume = "--steps 4 --resume " + ckpt.string() + " ";
  expect_one_line_error(run_dlbench("train --model resnet20 --batch-size 4 --threads 1 --lr 0.05 --data " +
                                    data.string() + " " + resume),
                        "written with --batch-size 8, this run has --batch-size 4");
  expect_one_line_error(run_dlbench(tiny_train(data) + resume + "--seed 7"), "written with --seed 42");
  expect_one_line_error(run_dlbench(tiny_train(data) + resume + "--momentum 0.5"), "--momentum 0.9");
  expect_one_line_error(run_dlbench(tiny_train(data) + resume + "--nesterov"), "written with no --nesterov");
  // The same shape, other labels: another data set.
  const fs::path other = make_idx_dir("resume_other_data", 2051, /*max_label=*/8);
  expect_one_line_error(run_dlbench(tiny_train(other) + resume), "data of 64 samples");
}

TEST(Resume, TheLayoutIsRefusedEvenAnyway) {
  const fs::path data = make_idx_dir("resume_layout");
  const fs::path ckpt = make_checkpoint(temp_dir("resume_layout_run"), data);
  expect_one_line_error(
      run_dlbench(tiny_train(data) + "--steps 4 --layout nchw --resume-anyway --resume " + ckpt.string()),
      "its weights are stored in that layout's order: resume with --layout nhwc");
}

TEST(Resume, AnywayContinuesAndSaysWhatDiffers) {
  const fs::path data = make_idx_dir("resume_anyway");
  const fs::path ckpt = make_checkpoint(temp_dir("resume_anyway_run"), data);
  const CommandResult r =
      run_dlbench(tiny_train(data) + "--steps 3 --seed 9 --resume-anyway --resume " + ckpt.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "--resume-anyway: continuing with --seed 9 (the checkpoint's run had --seed 42)");
  expect_one_line_error(run_dlbench(tiny_train(data) + "--steps 3 --resume-anyway"), "needs --resume");
}

// ---- bounds: each numeric flag refused past what the machine or the model allows ----

TEST(Bounds, ThreadsBeyondTheCoresAreRefused) {
  const std::string cores = std::to_string(sysconf(_SC_NPROCESSORS_ONLN));
  for (const char* threads : {"100000", "20000", "5000"}) {
    expect_one_line_error(run_dlbench(std::string("bench --model resnet20 --steps 1 --threads ") + threads),
                          std::string("--threads ") + threads + ": this process may run on");
  }
  expect_one_line_error(run_dlbench("train --model resnet20 --steps 1 --data-threads 100000"),
                        "--data-threads 100000");
}

TEST(Bounds, ImageSizeWithinTheModelAndTheMemory) {
  expect_one_line_error(run_dlbench("bench --model resnet50 --steps 1 --image-size 1"),
                        "--image-size 1: resnet50 reduces its input 32-fold; give at least 32");
  for (const char* model : {"resnet50", "resnet18"})
    expect_one_line_error(
        run_dlbench(std::string("bench --model ") + model + " --batch-size 2 --steps 1 --image-size 100000"),
        "--batch-size 2 --image-size 100000: the run's memory plan would take");
  expect_one_line_error(run_dlbench("bench --model resnet20 --steps 1 --accumulate-steps 100000000"),
                        "--batch-size 128 --accumulate-steps 100000000: the synthetic images would take");
  expect_one_line_error(run_dlbench("bench --model resnet50 --batch-size 64 --steps 1 --image-size 2048"),
                        "--batch-size 64 --image-size 2048: the run's memory plan would take");
  expect_one_line_error(run_dlbench("train --model resnet20 --data fashion-mnist --steps 1 --image-size 64"),
                        "IDX images are trained at their own size");
  // A size that fits is used, not ignored: the synthetic images are made at it.
  const CommandResult r = run_dlbench(
      "bench --model resnet18 --batch-size 2 --steps 1 --warmup-steps 0 --threads 1 --image-size 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "samples of 3x64x64");
}

TEST(Bounds, NumbersMustBeFiniteAndInRange) {
  expect_one_line_error(run_dlbench("bench --model resnet20 --steps 1 --lr inf"),
                        "--lr inf: must be a finite");
  expect_one_line_error(run_dlbench("bench --model resnet20 --steps 1 --lr nan"),
                        "--lr nan: must be a finite");
  expect_one_line_error(
      run_dlbench("train --model resnet20 --steps 1 --lr-schedule step --lr-decay-epochs -1"),
      "--lr-decay-epochs -1: each must be a positive");
  expect_one_line_error(run_dlbench("train --model resnet20 --steps 1 --lr-decay-epochs 5"),
                        "add --lr-schedule step");
  const CommandResult seed = run_dlbench("bench --model resnet20 --steps 1 --seed -1");
  EXPECT_EQ(seed.exit_code, 2) << seed.err;
  EXPECT_EQ(count_lines(seed.err), 1) << seed.err;
  EXPECT_CONTAINS(seed.err, "--seed -1: give a whole number, 0 or more");
  // Sizes whose 0 inside means "the model's own": a 0 typed by the user is refused, not run at the default.
  for (const char* command :
       {"bench --model gpt-mini --steps 1 --seq-len 0", "bench --model resnet20 --steps 1 --image-size 0",
        "data-bench --data synthetic --image-size 0"}) {
    const CommandResult zero = run_dlbench(command);
    EXPECT_EQ(zero.exit_code, 2) << command << ": " << zero.err;
    EXPECT_EQ(count_lines(zero.err), 1) << command << ": " << zero.err;
    EXPECT_CONTAINS(zero.err, " 0: give a whole number, 1 or more");
  }
}

// A rate that makes the loss non-finite is a failed run, in bench as in train.
TEST(Bounds, BenchThatDivergesFails) {
  const CommandResult r = run_dlbench(
      "bench --model resnet20 --batch-size 4 --steps 3 --warmup-steps 1 "
      "--threads 1 --lr 1e30");
  expect_one_line_error(r, "training diverged");
}

// ---- what is reported ----

// A run whose only step is the untimed warm-up measured no rate: null, and a line saying why.
TEST(Results, NoTimedStepIsNoMeasurement) {
  const fs::path dir = temp_dir("no_timed_step");
  const CommandResult r = run_dlbench("train --model resnet20 --batch-size 4 --threads 1 --steps 1 --json " +
                                      (dir / "r.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "no throughput measured");
  const nlohmann::json j = read_json(dir / "r.json");
  EXPECT_TRUE(j["images_per_second"].is_null()) << j["images_per_second"];
  EXPECT_TRUE(j["step_ms"].is_null());
  EXPECT_CONTAINS(j["measurement_note"].get<std::string>(), "no timed steps");
}

// The fields the README promises are in a training run's result; epochs count from 1 everywhere.
TEST(Results, TrainResultHasTheDocumentedFields) {
  const fs::path data = make_idx_dir("documented_fields");
  const fs::path json = temp_dir("documented_fields_out") / "r.json";
  const CommandResult r = run_dlbench(tiny_train(data) + "--epochs 1 --json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = read_json(json);
  for (const char* field : {"model",
                            "parameters",
                            "device",
                            "precision",
                            "batch_size",
                            "global_batch_size",
                            "ranks",
                            "steps",
                            "final_loss",
                            "images_per_second",
                            "images_per_second_per_device",
                            "launcher",
                            "communication_ms",
                            "step_ms",
                            "peak_memory_bytes",
                            "largest_batch",
                            "test_accuracy",
                            "losses",
                            "config",
                            "system"})
    EXPECT_TRUE(j.contains(field)) << field;
  ASSERT_EQ(j["evaluations"].size(), 1u);
  EXPECT_EQ(j["evaluations"][0]["epoch"], 1);
  EXPECT_CONTAINS(r.out, "epoch 1  test accuracy");
}

// What a run writes is what the result schema (bench/result.h) reads: read and written again, the same
// bytes, for a train run with its evaluation and a bench run.
TEST(Results, TheWrittenResultReadsBackAsTheSameBytes) {
  const fs::path data = make_idx_dir("result_schema");
  const fs::path dir = temp_dir("result_schema_out");
  const CommandResult train =
      run_dlbench(tiny_train(data) + "--steps 3 --eval-images 16 --json " + (dir / "train.json").string());
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const CommandResult bench =
      run_dlbench("bench --model resnet20 --batch-size 4 --threads 1 --steps 2 --warmup-steps 1 --json " +
                  (dir / "bench.json").string());
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  for (const char* name : {"train.json", "bench.json"}) {
    const std::string text = read_text((dir / name).string());
    const RunResult result = run_result_from_json(nlohmann::json::parse(text));
    EXPECT_TRUE(result.unknown.empty()) << name << ": " << result.unknown.dump();
    EXPECT_TRUE(result.absent.empty()) << name;
    EXPECT_EQ(to_json(result).dump(2) + "\n", text) << name;
  }
  const RunResult t = run_result_from_json(read_json(dir / "train.json"));
  ASSERT_TRUE(t.train && t.train->test);
  EXPECT_EQ(t.train->test->test_images, 16);
  EXPECT_EQ(t.train->losses.size(), 3u);
  EXPECT_FALSE(t.bench.has_value());
  const RunResult b = run_result_from_json(read_json(dir / "bench.json"));
  ASSERT_TRUE(b.bench.has_value());
  EXPECT_EQ(b.bench->step_times_ms.size(), 2u);
  EXPECT_FALSE(b.train.has_value());
}

TEST(Results, EvalImagesLimitsTheEvaluation) {
  const fs::path data = make_idx_dir("eval_images");
  const fs::path json = temp_dir("eval_images_out") / "r.json";
  const CommandResult r = run_dlbench(tiny_train(data) + "--steps 2 --eval-images 5 --json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_json(json)["test_images"], 5);
  EXPECT_CONTAINS(r.out, "(5 images");
  const CommandResult bench = run_dlbench("bench --model resnet20 --steps 1 --eval-images 5");
  EXPECT_EQ(bench.exit_code, 2) << bench.err;  // bench evaluates nothing: no such flag
  EXPECT_CONTAINS(bench.err, "--eval-images");
}

// Without --log-every, train reports by time (a step count suits a CPU or a GPU, not both), evaluation
// too; checkpoints are announced.
TEST(Results, ProgressLinesComeByTime) {
  const fs::path data = make_idx_dir("progress_by_time");
  const auto step_lines = [](const std::string& out) {
    int lines = 0;
    for (size_t at = out.find("\nstep "); at != std::string::npos; at = out.find("\nstep ", at + 1)) ++lines;
    return lines;
  };
  const std::string train =
      "train --model resnet20 --batch-size 2 --threads 1 --steps 120 --data " + data.string();
  // An interval longer than the run: only the last step's line (a step count would print several).
  const CommandResult slow = run_dlbench(train + " --log-seconds 1000");
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  EXPECT_EQ(step_lines(slow.out), 1) << slow.out;
  EXPECT_CONTAINS(slow.out, "step 120/120");
  // An interval shorter than a step: every step's line.
  const CommandResult fast = run_dlbench(train + " --log-seconds 0.000001");
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  EXPECT_EQ(step_lines(fast.out), 120);
  // Evaluation of the 16 test images, 2 at a time, with a line whenever the interval has passed.
  EXPECT_CONTAINS(fast.out, "evaluating: 2/16 test images");
  EXPECT_CONTAINS(fast.out, "evaluating: 14/16 test images");
  expect_one_line_error(run_dlbench("train --model resnet20 --steps 1 --log-seconds 0"), "--log-seconds 0");
}

TEST(CommandLine, BenchHelpSaysItTakesRealData) {
  const CommandResult r = run_dlbench("bench --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_CONTAINS(r.out, "synthetic data by default, or --data images or shards");
}

// ---- the command line ----

TEST(CommandLine, AMistypedCommandIsNamedWithTheNearestOne) {
  const CommandResult r = run_dlbench("trian --model resnet20");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_CONTAINS(r.err, "dlbench: error: unknown command 'trian' (did you mean 'train'?)");
  const CommandResult none = run_dlbench("");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_CONTAINS(none.err, "no command given");
}

// ---- stopping: SIGINT/SIGTERM between steps save first and say where the run stopped ----

// Starts a long training run, waits for its first progress line, sends `signal`, and returns the result.
CommandResult stop_training(const fs::path& data, const std::string& extra, const char* signal) {
  const std::string command =
      std::string(DLBENCH_BINARY) + " " + tiny_train(data) + "--steps 100000 --log-every 1 " + extra;
  const fs::path folder = temp_dir("stop_output"), out = folder / "stop.out", script = folder / "stop.sh";
  std::ofstream(script) << command << " > " << out.string() << " 2>&1 &\n"
                        << "pid=$!\n"
                        << "for i in $(seq 600); do grep -q 'step 3/' " << out.string()
                        << " && break; sleep 0.1; done\n"
                        << "kill -" << signal << " $pid\n"
                        << "wait $pid\n"
                        << "echo rc=$?\n";
  CommandResult r = run_shell("bash " + script.string(), 120);
  r.err = read_text(out.string());
  fs::remove_all(folder);
  return r;
}

TEST(Stopping, SigintSavesTheCheckpointAndSaysWhere) {
  const fs::path data = make_idx_dir("stop_sigint"), dir = temp_dir("stop_sigint_run");
  const fs::path ckpt = dir / "run.ckpt";
  const CommandResult r = stop_training(data, "--checkpoint " + ckpt.string(), "INT");
  EXPECT_CONTAINS(r.out, "rc=130");
  EXPECT_CONTAINS(r.err, "dlbench: stopped by SIGINT after step");
  EXPECT_CONTAINS(r.err, "continue with --resume " + ckpt.string());
  EXPECT_EQ(temporaries_in(dir), 0);
  // The saved state continues: resume it for one more step.
  ASSERT_TRUE(fs::exists(ckpt));
  const CommandResult resumed = run_dlbench(tiny_train(data) + "--epochs 2 --resume " + ckpt.string());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_CONTAINS(resumed.out, "resuming at step");
}

TEST(Stopping, SigtermWithoutCheckpointSaysNothingWasSaved) {
  const fs::path data = make_idx_dir("stop_sigterm"), dir = temp_dir("stop_sigterm_run");
  const fs::path json = dir / "r.json";
  const CommandResult r = stop_training(data, "--json " + json.string(), "TERM");
  EXPECT_CONTAINS(r.out, "rc=143");
  EXPECT_CONTAINS(r.err, "stopped by SIGTERM after step");
  EXPECT_CONTAINS(r.err, "nothing saved (give --checkpoint FILE");
  EXPECT_FALSE(fs::exists(json));
  EXPECT_EQ(temporaries_in(dir), 0);
}

}  // namespace
}  // namespace dlbench::testing
