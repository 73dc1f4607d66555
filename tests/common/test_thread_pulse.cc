// ThreadPulse (common/thread_pulse.h): the watched thread (here the test's own, bound first) shows
// a sign of life between two checks when it is marked, sleeps as announced work or computes; it
// shows none while it sleeps unannounced (as `--fault hang`). Checks 100 ms apart.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/thread_pulse.h"

namespace starring {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kGap = std::chrono::milliseconds(100);

TEST(ThreadPulse, TellsSignsOfLifeFromAnUnannouncedSleep) {
  ThreadPulse p;
  p.bind_to_this_thread();  // a mark: the first check sees it
  EXPECT_TRUE(p.alive_since_last_check(Clock::now()));
  std::this_thread::sleep_for(kGap);  // asleep, unannounced: nothing
  EXPECT_FALSE(p.alive_since_last_check(Clock::now()));
  std::this_thread::sleep_for(kGap);
  p.mark();  // began a step
  EXPECT_TRUE(p.alive_since_last_check(Clock::now()));
  p.working_until(Clock::now() + 2 * kGap);  // a --straggler's sleep
  std::this_thread::sleep_for(kGap);
  EXPECT_TRUE(p.alive_since_last_check(Clock::now()));
  std::this_thread::sleep_for(kGap);
  EXPECT_TRUE(p.alive_since_last_check(Clock::now()));  // it ended within this gap
  std::this_thread::sleep_for(kGap);
  EXPECT_FALSE(p.alive_since_last_check(Clock::now()));
  const auto t = Clock::now();  // computing: the CPU clock runs
  volatile double x = 1;
  while (Clock::now() - t < kGap)
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
  EXPECT_TRUE(p.alive_since_last_check(Clock::now()));
}

// The watcher is another thread: it reads the bound thread's CPU clock, not its own.
TEST(ThreadPulse, ReadsTheBoundThreadsClockFromAnother) {
  ThreadPulse p;
  p.bind_to_this_thread();
  bool first = false, asleep = true;
  std::thread watcher([&] {
    first = p.alive_since_last_check(Clock::now());  // the bind's mark
    const auto t = Clock::now();  // the watcher computes; the bound thread sleeps
    volatile double x = 1;
    while (Clock::now() - t < kGap)
      for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
    asleep = !p.alive_since_last_check(Clock::now());
  });
  watcher.join();
  EXPECT_TRUE(first);
  EXPECT_TRUE(asleep);
}

}  // namespace
}  // namespace starring
