// ThreadPulse: whether one thread (a worker's trainer thread) showed a sign of life lately, for a
// watcher on another thread that vouches for it to peers (ps/worker_comm.cc's heartbeats to the
// servers under any --consistency, trainer/peer_watch.cc's notes to the other workers under asp
// and ssp).
//
// Signs of life between two checks: a mark() (the trainer began a step, handed over a gradient,
// got its parameters), simulated work announced with working_until() (a --straggler's sleep,
// which stands for a slow computation), or CPU time: the watched thread's own CPU clock
// (pthread_getcpuclockid) advanced by at least 1 % of the wall time between the checks. A thread
// asleep or blocked (`--fault hang`, a trainer stuck on a lock) runs none; a computing one (a
// step of a wide model, an evaluation) runs most of it even on a loaded machine. So a live worker
// in a step longer than --timeout is vouched for, and a stuck one stops being within one check.
// Not told apart: a thread that spins forever looks like a long step (docs/LIMITS.md).
//
//   ThreadPulse pulse;
//   pulse.bind_to_this_thread();            // on the watched thread, before the watcher starts
//   pulse.mark();                           // watched thread, at each step
//   if (pulse.alive_since_last_check(now))  // watcher thread, every timeout/4 or so
//     heartbeat();
#pragma once
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace starring {

class ThreadPulse {
 public:
  using Clock = std::chrono::steady_clock;

  // Watches the calling thread's CPU clock from now on (without one, marks alone count).
  void bind_to_this_thread();
  // Any thread: the watched thread did something now.
  void mark() { last_mark_.store(Clock::now().time_since_epoch().count(), kRelaxed); }
  // Any thread: the watched thread is about to sleep until `until` as simulated work.
  void working_until(Clock::time_point until) {
    busy_until_.store(until.time_since_epoch().count(), kRelaxed);
  }
  // One watcher thread: whether the watched thread showed a sign of life since the previous call
  // (the first call: since bind_to_this_thread()).
  bool alive_since_last_check(Clock::time_point now);

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  std::atomic<Clock::rep> last_mark_{0}, busy_until_{0};
  bool has_cpu_clock_ = false;
  clockid_t cpu_clock_{};
  std::int64_t cpu_ns_ = -1;  // the CPU clock at the previous check (-1: unreadable)
  Clock::time_point checked_at_{};
};

}  // namespace starring
