// ProgressWaiter: the idle policy of a polling loop that drives non-blocking requests (the event
// loops of RingAllreduce and ShmRing, the mpi engine's MPI_Iallreduce and the nccl engine's
// stream polls, which run on BucketSync's communication thread). While requests progress the loop
// spins (Open MPI only moves data inside MPI calls, so testing is what makes progress); after a
// short while without progress it yields the core (ranks may outnumber cores), then sleeps with
// a growing back-off (max_sleep_us, 0: yield only, for requests whose progress is invisible
// until they complete and that advance only while tested). When no progress happened for `timeout`
// it throws TimeoutError with `what()` describing the operation that is stuck, and a census
// (common/census.h) of which ranks are stuck in it too: the one that is not is the one to look at.
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

namespace starring {

class ProgressWaiter {
 public:
  using Clock = std::chrono::steady_clock;
  // spin: how long to keep polling without yielding after the last progress. Long spins give
  // the lowest latency when every rank has a core of its own; with more ranks than cores a rank
  // that spins steals the core its peer needs, so spin ~0 there.
  ProgressWaiter(Comm& comm, Seconds timeout,
                 std::chrono::microseconds spin = std::chrono::microseconds(0),
                 int max_sleep_us = 500)
      : comm_(comm), timeout_(timeout), spin_(spin), max_sleep_us_(max_sleep_us) {
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
    const auto waited = Clock::now() - last_;
    if (waited > timeout_) {
      const std::string msg = timeout_message(comm_, timeout_, what());
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
  Comm& comm_;
  std::chrono::duration<double> timeout_;
  std::chrono::microseconds spin_;
  int max_sleep_us_;
  Clock::time_point last_;
  long idle_iters_ = 0;
  int sleep_us_ = 2;
};

}  // namespace starring
