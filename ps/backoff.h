// Backoff for the parameter server's polling loops. The Comm interface has test() but no
// wait-any, and Open MPI moves a large message only while both sides call into MPI, so the
// loops poll: spin briefly after progress (a transfer in flight keeps moving), then yield the
// core (on an oversubscribed machine another rank can run), then sleep with a growing interval
// so an idle server or worker costs no CPU.
#pragma once
#include <algorithm>
#include <chrono>
#include <thread>

namespace starring::ps {

class Backoff {
 public:
  void reset() {
    idle_since_ = Clock::now();
    idle_ = false;
    sleep_ = std::chrono::microseconds(5);
  }
  void idle() {
    if (!idle_) {
      idle_ = true;
      idle_since_ = Clock::now();
    }
    const auto waited = Clock::now() - idle_since_;
    if (waited < std::chrono::microseconds(50)) return;
    if (waited < std::chrono::milliseconds(5)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(200));
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point idle_since_ = Clock::now();
  bool idle_ = false;
  std::chrono::microseconds sleep_{5};
};

}  // namespace starring::ps
