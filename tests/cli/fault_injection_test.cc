// Fault injection through the real binary: every output on a disk that fills up mid-write (the results of
// a sweep: tests/cli/sweep_cli_test.cc), and runs
// killed by SIGKILL at random moments. Afterwards the file the user had is intact, the rerun works and
// clears what the killed run left; after SIGINT/SIGTERM nothing is left at all.
//
// The full disk is a small tmpfs of the test's own where it may mount one (as root), else the folder
// under a file-size limit (RLIMIT_FSIZE with SIGXFSZ ignored: a write past it fails with EFBIG; forced
// with DLBENCH_TEST_FULL_DISK=rlimit). Both are real short writes to the program; the tmpfs gives ENOSPC,
// as a full disk does.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cli/tiny_data.h"
#include "cli_util.h"
#include "core/file_io.h"
#include "temp_dir.h"

namespace dlbench::testing {
namespace {

std::string file_bytes(const fs::path& path) { return read_text(path.string()); }

// A folder in which new data runs out after about `room_kib` KiB (a tmpfs counts whole pages: rounded up to
// 4 KiB), and space that can be freed again.
class FullDisk {
 public:
  FullDisk(const std::string& name, int room_kib) : dir_(temp_dir(name)), room_kib_(room_kib) {}
  ~FullDisk() {
    if (mounted_) ::umount(dir_.c_str());
  }
  // Fills the folder: `keep` (files copied in first, which must stay intact) and room_kib KiB more.
  void fill(const std::vector<fs::path>& keep) {
    uintmax_t bytes = 0;
    for (const fs::path& file : keep) bytes += (fs::file_size(file) + 4095) / 4096 * 4096;
    const uintmax_t filler = 8 << 20;  // freed later, so that the rerun has room
    const uintmax_t size = bytes + filler + static_cast<uintmax_t>(room_kib_) * 1024;
    const std::string options = "size=" + std::to_string(size);
    const char* mode = std::getenv("DLBENCH_TEST_FULL_DISK");  // "rlimit": the fallback, even as root
    mounted_ = !(mode && std::string(mode) == "rlimit") &&
               ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, options.c_str()) == 0;
    for (const fs::path& file : keep) fs::copy_file(file, dir_ / file.filename());
    if (mounted_) {
      std::ofstream(dir_ / "filler")
          .write(std::string(filler, 'f').data(), static_cast<std::streamsize>(filler));
    }
  }
  // The shell line that runs `command` with the room this disk leaves.
  std::string run(const std::string& command) const {
    if (mounted_ || freed_) return command;
    // The limit holds for the command alone: its output goes through pipes to a shell without it (the
    // test's output files would otherwise be limited too, and the error line lost).
    return "bash -c 'set -o pipefail; (trap \"\" XFSZ; ulimit -f " + std::to_string(room_kib_) + "; exec " +
           command + ") 2> >(cat >&2) | cat'";
  }
  void free_space() {
    freed_ = true;
    if (mounted_) fs::remove(dir_ / "filler");
  }
  const fs::path& path() const { return dir_; }
  // What the folder holds, but the filler.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_))
      if (entry.path().filename() != "filler") names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path dir_;
  int room_kib_;
  bool mounted_ = false, freed_ = false;
};

// The line of a failed write: one line, the cause, and that the file is as it was.
void expect_full_disk_error(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("dlbench: error: ", 0), 0u) << r.err;
  EXPECT_TRUE(r.err.find("free disk space") != std::string::npos ||
              r.err.find("No space left") != std::string::npos ||
              r.err.find("File too large") != std::string::npos)
      << r.err;
}

const std::string kBinary = DLBENCH_BINARY;
std::string tiny_train(const fs::path& data) {
  return kBinary + " train --model resnet20 --batch-size 8 --threads 1 --lr 0.05 --data " + data.string() +
         " ";
}

TEST(FullDisk, ACheckpointSaveKeepsThePreviousCheckpoint) {
  const fs::path data = make_idx_dir("full_ckpt_data"), made = temp_dir("full_ckpt_made") / "run.ckpt";
  ASSERT_EQ(run_shell(tiny_train(data) + "--steps 2 --checkpoint " + made.string()).exit_code, 0);
  FullDisk disk("full_ckpt", 256);  // a checkpoint is ~2 MiB: its next save runs out
  disk.fill({made});
  const fs::path ckpt = disk.path() / "run.ckpt";
  const std::string before = file_bytes(ckpt);
  const std::string resume =
      tiny_train(data) + "--steps 4 --resume " + ckpt.string() + " --checkpoint " + ckpt.string();
  expect_full_disk_error(run_shell(disk.run(resume)));
  EXPECT_EQ(file_bytes(ckpt), before);
  EXPECT_EQ(disk.listing(), std::vector<std::string>{"run.ckpt"});
  disk.free_space();
  const CommandResult rerun = run_shell(disk.run(resume));
  EXPECT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_CONTAINS(rerun.out, "checkpoint of step 4 saved");
  EXPECT_EQ(disk.listing(), std::vector<std::string>{"run.ckpt"});
}

TEST(FullDisk, AResultAndAnMlperfLogKeepTheFilesBefore) {
  FullDisk disk("full_json", 0);  // no room at all: the first write of the result and of the log fails
  const fs::path json = disk.path() / "r.json", log = disk.path() / "run.mllog";
  const fs::path old_json = temp_dir("full_json_old") / "r.json",
                 old_log = old_json.parent_path() / "run.mllog";
  std::ofstream(old_json) << "{\"mine\": true}\n";
  std::ofstream(old_log) << ":::MLLOG {\"key\": \"mine\"}\n";  // an earlier run's log: replaceable
  disk.fill({old_json, old_log});
  const std::string bench =
      kBinary + " bench --model resnet20 --batch-size 2 --steps 1 --warmup-steps 0 --threads 1 --json " +
      json.string();
  expect_full_disk_error(run_shell(disk.run(bench)));
  const fs::path data = make_idx_dir("full_json_data");
  const std::string train = tiny_train(data) + "--steps 40 --log-every 10 --mlperf-log " + log.string();
  expect_full_disk_error(run_shell(disk.run(train)));
  EXPECT_EQ(file_bytes(json), "{\"mine\": true}\n");
  EXPECT_EQ(file_bytes(log), ":::MLLOG {\"key\": \"mine\"}\n");
  EXPECT_EQ(disk.listing(), (std::vector<std::string>{"r.json", "run.mllog"}));
  disk.free_space();
  ASSERT_EQ(run_shell(disk.run(bench)).exit_code, 0);
  ASSERT_EQ(run_shell(disk.run(train)).exit_code, 0);
  EXPECT_CONTAINS(file_bytes(json), "images_per_second");
  EXPECT_CONTAINS(file_bytes(log), "\"run_stop\"");
  EXPECT_EQ(disk.listing(), (std::vector<std::string>{"r.json", "run.mllog"}));
}

TEST(FullDisk, ExportAndPackLeaveNothingAndTheRerunWorks) {
  const fs::path idx = make_idx_dir("full_export_data");
  FullDisk disk("full_export", 0);
  disk.fill({});
  const fs::path images = disk.path() / "images";
  const std::string export_images = kBinary + " export-images " + images.string() + " --data " + idx.string();
  expect_full_disk_error(run_shell(disk.run(export_images)));
  EXPECT_TRUE(disk.listing().empty());
  disk.free_space();
  ASSERT_EQ(run_shell(disk.run(export_images)).exit_code, 0);
  // Pack on a disk that is full again.
  FullDisk small("full_pack", 8);
  small.fill({});
  const std::string pack = kBinary + " pack " + images.string() + " " + (small.path() / "shards").string();
  expect_full_disk_error(run_shell(small.run(pack)));
  EXPECT_TRUE(small.listing().empty());
  small.free_space();
  ASSERT_EQ(run_shell(small.run(pack)).exit_code, 0);
  EXPECT_EQ(small.listing(), std::vector<std::string>{"shards"});
}

// Runs `command` in the background and kills it with `signal` after `delay_ms`; returns its exit status.
// With job control on (set -m): a script's background command otherwise starts with SIGINT ignored, and a
// SIGINT that lands before dlbench installs its handler (its shared libraries still loading, on a loaded
// machine) was lost, the run going on until the timeout (CI saw status 0 after 120 s). So the signal ends
// the command whenever it lands: by dlbench's handler, or before it by the default action, both with
// 128 + the signal and before anything was written.
int kill_after(const std::string& command, const char* signal, int delay_ms) {
  const fs::path script = temp_dir("kill_after") / "run.sh";
  std::ofstream(script) << "set -m\n"
                        << command << " > /dev/null 2>&1 &\npid=$!\nsleep " << delay_ms / 1000.0 << "\nkill -"
                        << signal << " $pid\nwait $pid\necho $?\n";
  const CommandResult r = run_shell("bash " + script.string(), 120);
  fs::remove_all(script.parent_path());
  return std::atoi(r.out.c_str());
}

// SIGKILL at random moments of a run that saves a checkpoint every step: the checkpoint left is always a
// whole one (the next run resumes it instead of failing), and the first save of a later run clears the
// temporaries the killed ones left; a run stopped by SIGINT leaves none.
TEST(Killed, AtRandomMomentsTheCheckpointIsWholeAndTheRerunCleansUp) {
  const fs::path data = make_idx_dir("killed_data"), dir = temp_dir("killed_run");
  const fs::path ckpt = dir / "run.ckpt";
  std::mt19937 random(static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  const std::string run = tiny_train(data) + "--steps 100000 --save-every 1 --checkpoint " + ckpt.string();
  for (int attempt = 0; attempt < 6; ++attempt) {
    const int delay = 300 + static_cast<int>(random() % 1500);
    SCOPED_TRACE("attempt " + std::to_string(attempt) + ", killed after " + std::to_string(delay) + " ms");
    const bool resumes = fs::exists(ckpt);
    // 137: running when killed. A checkpoint that did not load would have ended the run with 1 first.
    EXPECT_EQ(kill_after(run + (resumes ? " --resume " + ckpt.string() : std::string()), "KILL", delay), 137);
  }
  ASSERT_TRUE(fs::exists(ckpt)) << "no kill landed after a save";
  EXPECT_EQ(kill_after(run + " --resume " + ckpt.string(), "INT", 1500), 130);
  EXPECT_EQ(temporaries_in(dir), 0);
}

// bench has no state to save: a signal ends it at once, without a result and without a temporary.
TEST(Killed, ASignalledBenchLeavesNothing) {
  const fs::path dir = temp_dir("signalled_bench");
  for (const char* signal : {"INT", "TERM"}) {
    const int status = kill_after(kBinary +
                                      " bench --model resnet20 --batch-size 8 --steps 100000 --threads 1 "
                                      "--json " +
                                      (dir / "r.json").string(),
                                  signal, 800);
    EXPECT_EQ(status, std::string(signal) == "INT" ? 130 : 143);
    EXPECT_TRUE(fs::is_empty(dir)) << signal;
  }
}

}  // namespace
}  // namespace dlbench::testing
