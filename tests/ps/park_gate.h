// ParkGate: where a test's Comm wrapper makes its owner's polling loop stand still, as a
// descheduled or stopped rank would (test_ps_liveness: a server; test_ps_worker_liveness: a
// worker's comm thread). The wrapper's own flags live under the gate's lock (set, wait_for,
// park_if's condition); every wait is bounded by `limit`, which only a broken loop reaches.
#pragma once
#include <condition_variable>
#include <mutex>

#include "common/comm.h"

namespace starring::ps {

class ParkGate {
 public:
  explicit ParkGate(Seconds limit) : limit_(limit) {}

  // Runs f under the lock and wakes the waiters.
  template <class F>
  void set(F f) {
    std::lock_guard<std::mutex> lk(mu_);
    f();
    cv_.notify_all();
  }
  // Waits until p() holds (false: the limit passed first).
  template <class P>
  bool wait_for(P p) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, limit_, p);
  }
  // The calling thread stands still here until release() when park() holds (under the lock)
  // and release() has not been called yet.
  template <class P>
  void park_if(P park) {
    std::unique_lock<std::mutex> lk(mu_);
    if (released_ || !park()) return;
    parked_ = true;
    cv_.notify_all();
    cv_.wait_for(lk, limit_, [&] { return released_; });
  }
  bool wait_parked() {
    return wait_for([&] { return parked_; });
  }
  void release() {
    set([&] { released_ = true; });
  }

 private:
  const Seconds limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool parked_ = false, released_ = false;
};

}  // namespace starring::ps
