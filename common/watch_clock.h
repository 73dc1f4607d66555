// WatchClock: how much of a polling loop's wait counts against the peer it waits for.
//
// A parameter server names a worker that sent nothing for the timeout, and a PS worker's comm
// thread names a server that did not reply within its deadline; both count only time the loop
// doing the watching was running. The loops check every ~10 ms (due()); of a longer pause
// between two checks (the thread descheduled on a loaded machine, the whole process stopped,
// e.g. by a sanitizer's runtime, or one long message) only max(timeout / 4, 50 ms) counts: the
// rest is excused, and the caller moves every start it measures a deadline from forward by it
// (excuse()). The loop must also not name a peer whose message is already waiting to be polled.
// Used by ServerLoop (ps/server_liveness.cc), PsWorker's comm thread (ps/worker_comm.cc) and
// the trainer's PeerWatch (trainer/peer_watch.h).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "common/comm.h"

namespace starring {

class WatchClock {
 public:
  using Clock = std::chrono::steady_clock;

  WatchClock() = default;
  WatchClock(Seconds timeout, Clock::time_point start)
      : slack_(std::max<Clock::duration>(std::chrono::duration_cast<Clock::duration>(timeout / 4),
                                         std::chrono::milliseconds(50))),
        last_(start) {}

  bool due(Clock::time_point now) const { return now - last_ > std::chrono::milliseconds(10); }

  // A check at `now`: returns the part of the pause since the previous check that counts as
  // nobody's silence (zero for a pause up to the slack).
  Clock::duration check(Clock::time_point now) {
    const auto gap = now - last_;
    last_ = now;
    longest_ = std::max(longest_, gap);
    if (gap <= slack_) return Clock::duration::zero();
    not_watching_ += gap - slack_;
    return gap - slack_;
  }

  // A deadline's start moved forward by an excused pause, never past now.
  static Clock::time_point excuse(Clock::time_point t, Clock::duration excused,
                                  Clock::time_point now) {
    return std::min(t + excused, now);
  }

  // For a timeout message: "paused up to 1.23 s between checks, 1.10 s of pauses not counted
  // as anyone's silence".
  std::string summary() const {
    char b[128];
    std::snprintf(b, sizeof(b),
                  "paused up to %.2f s between checks, %.2f s of pauses not counted as anyone's "
                  "silence",
                  Seconds(longest_).count(), Seconds(not_watching_).count());
    return b;
  }

 private:
  Clock::duration slack_ = std::chrono::milliseconds(50);
  Clock::time_point last_ = Clock::now();
  Clock::duration longest_{}, not_watching_{};
};

}  // namespace starring
