// ProgressWaiter: the idle policy of a polling loop that drives non-blocking requests (the event
// loops of RingAllreduce and ShmRing, the mpi engine's MPI_Iallreduce and the nccl engine's
// stream polls, which run on BucketSync's communication thread). While requests progress the loop
// spins (Open MPI only moves data inside MPI calls, so testing is what makes progress); after a
// short while without progress it yields the core (ranks may outnumber cores), then sleeps with
// a growing back-off (max_sleep_us, 0: yield only, for requests whose progress is invisible
// until they complete and that advance only while tested). When no progress happened for `timeout`
// it throws TimeoutError with `what()` describing the operation that is stuck, and a census
// (common/census.h) of which ranks are stuck in it too: the one that is not is the one to look at.
// With a PeerLiveness (common/peer_liveness.h: the trainer's PeerWatch, handed over by
// BucketSync), a wait past `timeout` first asks it, every 10 ms: while a peer's trainer is alive
// (a straggler in a step longer than the timeout) the wait goes on, spent as the loop's back-off;
// a silent peer (stopped, dead) is named in the error instead of the census (this rank's note still
// goes out, census_join, so a peer whose census this is counts it as timed out).
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common/census.h"
#include "common/comm.h"
#include "common/comm_util.h"
#include "common/error.h"
#include "common/peer_liveness.h"

namespace starring {

class ProgressWaiter {
 public:
  using Clock = std::chrono::steady_clock;
  // spin: how long to keep polling without yielding after the last progress. Long spins give
  // the lowest latency when every rank has a core of its own; with more ranks than cores a rank
  // that spins steals the core its peer needs, so spin ~0 there.
  ProgressWaiter(Comm& comm, Seconds timeout,
                 std::chrono::microseconds spin = std::chrono::microseconds(0),
                 int max_sleep_us = 500, PeerLiveness* liveness = nullptr)
      : comm_(comm),
        timeout_(timeout),
        spin_(spin),
        max_sleep_us_(max_sleep_us),
        liveness_(liveness) {
    progressed();
  }
  void progressed() {
    last_ = Clock::now();
    idle_iters_ = 0;
    sleep_us_ = 2;
  }
  // Called once per loop iteration in which nothing completed.
  void idle(const std::function<std::string()>& what) {
    ++idle_iters_;
    if (idle_iters_ < 64) return;  // spin (each iteration already tested the requests)
    const auto now = Clock::now();
    const auto waited = now - last_;
    if (waited > timeout_ && !peers_alive(now)) {
      const std::string msg = timeout_message(comm_, timeout_, what());
      if (!why_.empty()) {
        census_join(comm_);  // stuck here too, for a peer's census (common/census.h)
        throw TimeoutError(msg + "; " + why_);
      }
      throw TimeoutError(msg + census(comm_, census_grace(timeout_)));
    }
    if (waited < spin_) return;
    if (waited < std::chrono::milliseconds(2) || max_sleep_us_ == 0) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
      sleep_us_ = std::min(sleep_us_ * 2, max_sleep_us_);
    }
  }

 private:
  // Past the deadline: whether the liveness (if any) says to wait on; asked every 10 ms.
  bool peers_alive(Clock::time_point now) {
    if (!liveness_) return false;
    if (now < next_ask_) return true;
    if (!liveness_->peers_alive(&why_)) return false;
    next_ask_ = now + std::chrono::milliseconds(10);
    return true;
  }

  Comm& comm_;
  std::chrono::duration<double> timeout_;
  std::chrono::microseconds spin_;
  int max_sleep_us_;
  PeerLiveness* liveness_;
  Clock::time_point last_, next_ask_{};
  std::string why_;
  long idle_iters_ = 0;
  int sleep_us_ = 2;
};

}  // namespace starring
