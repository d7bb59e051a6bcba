// The shared-memory control plane of one-process ranks (nccl-threads uses it) on plain threads: exact
// results, an aborted group, and its watchdog stopping the process when a rank stalls.
#include "parallel/thread_group.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "parallel/watchdog.h"

namespace dlbench::parallel {
namespace {

void on_ranks(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

TEST(ThreadGroup, ControlPlaneIsExactOnEveryRank) {
  for (int n : {1, 2, 4, 7}) {
    ThreadGroup group(n, 30.0);
    std::atomic<int> failures{0};
    on_ranks(n, [&](int r) {
      for (int round = 0; round < 50; ++round) {  // slots reused many times: no rank reads another round
        if (group.sum(r, r + 1.0 + round) != n * (n + 1) / 2.0 + n * round) ++failures;
        if (group.max(r, r == 0 ? 1000.0 + round : -1.0 * r) != 1000.0 + round) ++failures;
        auto all =
            group.all_gather(r, std::string(static_cast<size_t>(r), 'a' + static_cast<char>(round % 26)));
        for (int q = 0; q < n; ++q) {
          if (all[static_cast<size_t>(q)] !=
              std::string(static_cast<size_t>(q), 'a' + static_cast<char>(round % 26)))
            ++failures;
        }
        group.barrier(r);
      }
    });
    EXPECT_EQ(failures.load(), 0) << n << " ranks";
    // Every collective was counted and finished.
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(group.tracker(r)->issued(), 200);
      EXPECT_EQ(group.tracker(r)->snapshot().pending_seconds, -1.0);
    }
  }
}

TEST(ThreadGroup, AbortWakesTheRanksThatWait) {
  ThreadGroup group(3, 30.0);
  std::atomic<int> stopped{0};
  on_ranks(3, [&](int r) {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      group.abort("rank 2: out of memory");
      return;
    }
    try {
      group.barrier(r);
    } catch (const std::exception& e) {
      EXPECT_STREQ(e.what(), "stopped: another rank failed: rank 2: out of memory");
      ++stopped;
    }
  });
  EXPECT_EQ(stopped.load(), 2);
}

// The child process: 4 ranks step through barriers; DLBENCH_TEST_STALL puts rank 2 to sleep at step 3 for
// far longer than the timeout. Returns normally only if nothing stopped it.
void stalled_run() {
  setenv("DLBENCH_TEST_STALL", "2:3:30", 1);
  ThreadGroup group(4, 1.0);
  on_ranks(4, [&](int r) {
    for (int step = 0; step < 6; ++step) {
      group.tracker(r)->set_step(step);
      group.barrier(r);
    }
  });
  std::exit(0);
}

TEST(ThreadGroupDeathTest, StallStopsTheProcessNamingRankAndStep) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EXIT(stalled_run(), ::testing::ExitedWithCode(kStalledExitCode),
              // The ranks that reached the barrier first (a loaded machine may not have run all three yet).
              "dlbench: error: rank 2 stalled at step 3: ranks [013, ]+ waited 1\\.[0-9] s for it in barrier "
              "\\(collective #4; timeout 1 s\\)");
  // Detected within the timeout (plus the watchdog's period and the child's start), not after the 30 s.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

}  // namespace
}  // namespace dlbench::parallel
