// StallWatch (common/stall_watch.h) with a short limit (the test-only constructor: the real one is
// --timeout + 10 s): it fires naming the rank and the call when nothing progresses for the limit,
// not before; progress() restarts the limit, so a series of calls that goes on progressing is
// never cut, however long it lasts in all; a watch destroyed before its limit says nothing; and
// the real action prints the line and exits 1. The bounds are generous (limits of 0.5-1 s,
// upper bounds widened by the scheduling lag of this process), for a shared, loaded machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/stall_watch.h"
#include "tests/scheduling_lag.h"

namespace starring {
namespace {

using Clock = std::chrono::steady_clock;
using starring::testing::SchedulingLag;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What the watch's on_fire saw; shared with the watch's thread, which may outlive the watch.
struct Fired {
  std::mutex m;
  std::condition_variable cv;
  std::optional<Clock::time_point> at;
  std::string line;

  StallWatch::OnFire hook(const std::shared_ptr<Fired>& self) {
    return [self](const std::string& l) {
      std::lock_guard lk(self->m);
      self->at = Clock::now();
      self->line = l;
      self->cv.notify_all();
    };
  }
  // Waits up to `s` seconds for the watch to fire; true when it has.
  bool wait(double s) {
    std::unique_lock lk(m);
    return cv.wait_for(lk, std::chrono::duration<double>(s), [&] { return at.has_value(); });
  }
  bool fired() {
    std::lock_guard lk(m);
    return at.has_value();
  }
};

// No progress: fires once the limit has passed, not before, naming this rank (0: the test binary
// is a singleton MPI process) and the call, with the reason.
TEST(StallWatch, FiresAfterTheLimitNamingTheRankAndTheCall) {
  constexpr double kLimit = 0.5;
  auto f = std::make_shared<Fired>();
  SchedulingLag lag;
  const auto t0 = Clock::now();
  StallWatch w("MPI_Comm_dup (a test's call)", "another rank is stuck", kLimit, f->hook(f));
  ASSERT_TRUE(f->wait(60)) << "never fired";
  const double lagged = lag.stop();
  const double took = std::chrono::duration<double>(*f->at - t0).count();
  EXPECT_GE(took, kLimit);
  EXPECT_LT(took, kLimit + 1.5 + lagged) << "scheduling lag " << lagged << " s";
  EXPECT_EQ(f->line,
            "rank 0: MPI_Comm_dup (a test's call) did not complete within 0.5 s (the limit "
            "given): another rank is stuck");
}

// progress() every 20 ms for 3 limits: no firing, however long the series takes in all. Once the
// calls stop, it fires a limit after the last one (not sooner), so the restart is what held it.
TEST(StallWatch, ProgressRestartsTheLimit) {
  constexpr double kLimit = 1.0;
  auto f = std::make_shared<Fired>();
  StallWatch w("MPI_Allreduce (a series)", "a peer is stuck", kLimit, f->hook(f));
  const auto t0 = Clock::now();
  double longest_gap = 0;
  auto last = Clock::now();
  while (since(t0) < 3 * kLimit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    w.progress();
    longest_gap = std::max(longest_gap, since(last));
    last = Clock::now();
  }
  // A pause of this thread near the limit (a machine loaded far beyond its cores) would be a real
  // stall: the watch may then fire, and the run says nothing about the restart.
  if (longest_gap > 0.6 * kLimit) {
    GTEST_SKIP() << "this thread paused " << longest_gap << " s between two progress() calls";
  }
  EXPECT_FALSE(f->fired()) << "fired at " << std::chrono::duration<double>(*f->at - t0).count()
                           << " s though progress() came at most " << longest_gap
                           << " s apart: " << f->line;
  SchedulingLag lag;
  ASSERT_TRUE(f->wait(60)) << "never fired after progress() stopped";
  const double lagged = lag.stop();
  const double after = std::chrono::duration<double>(*f->at - last).count();
  EXPECT_GE(after, kLimit);
  EXPECT_LT(after, kLimit + 1.5 + lagged) << "scheduling lag " << lagged << " s";
  EXPECT_NE(f->line.find("rank 0: MPI_Allreduce (a series) did not complete within 1 s"),
            std::string::npos)
      << f->line;
}

// Destroyed before the limit (the call completed): silent, also well after (twice) the limit
// would have passed.
TEST(StallWatch, DestroyedBeforeTheLimitIsSilent) {
  constexpr double kLimit = 0.5;
  auto f = std::make_shared<Fired>();
  {
    StallWatch w("MPI_Barrier (a test's call)", "a peer is stuck", kLimit, f->hook(f));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    w.progress();
  }
  EXPECT_FALSE(f->wait(2 * kLimit)) << f->line;
}

// The real action (no on_fire): the line on stderr, exit status 1. The child re-executes the test
// binary (a fork of this process, MPI's threads running, need not be safe).
TEST(StallWatchDeathTest, PrintsTheLineAndExits1) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StallWatch w("MPI_Win_allocate_shared (a test's call)", "a peer is stuck", 0.2, nullptr);
        std::this_thread::sleep_for(std::chrono::seconds(60));
        std::exit(0);
      },
      ::testing::ExitedWithCode(1),
      "starring: error: rank 0: MPI_Win_allocate_shared \\(a test's call\\) did not complete "
      "within 0.2 s \\(the limit given\\): a peer is stuck");
}

}  // namespace
}  // namespace starring
