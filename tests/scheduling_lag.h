// SchedulingLag: a control, measured in the same run, for tests that bound in wall-clock time how
// soon a timeout fires. While the test waits, a thread of this process sleeps in 10 ms steps and
// adds up how much later than asked each step ended. On a machine loaded far beyond its cores
// (other jobs, ranks outnumbering cores) the threads of the process run late by about as much,
// the timed-out rank's included, so a bound of "nominal + lag" still fails a timeout that fires
// far too late on a machine that runs this process on time, without failing one that the
// machine's load delayed. The bound stays finite: the lag is at most the time waited.
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace starring::testing {

class SchedulingLag {
 public:
  SchedulingLag() : thread_([this] { run(); }) {}
  ~SchedulingLag() { stop(); }
  SchedulingLag(const SchedulingLag&) = delete;
  SchedulingLag& operator=(const SchedulingLag&) = delete;

  // Stops the probe (once) and returns the seconds it woke late in all.
  double stop() {
    join();
    return std::chrono::duration<double>(lag_).count();
  }
  // Stops the probe (once) and returns the most seconds it woke late at once: about the longest
  // a thread of this process waited for a core.
  double longest() {
    join();
    return std::chrono::duration<double>(longest_).count();
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kStep{10};

  void join() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    auto due = Clock::now() + kStep;
    while (!cv_.wait_until(lk, due, [this] { return stopping_; })) {
      const auto now = Clock::now();
      if (now > due) {
        lag_ += now - due;
        longest_ = std::max(longest_, now - due);
      }
      due = now + kStep;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  Clock::duration lag_{0}, longest_{0};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace starring::testing
