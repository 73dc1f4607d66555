// PeerWatch: under asp and ssp, a worker waits at the workers' meetings (the barriers of an
// evaluation, a checkpoint, the start and the end of the run) for a peer that is slow but alive,
// and still names one that is silent, stopped or stuck within about --timeout.
//
// Under bsp or the ring no worker runs more than a step ahead, so a meeting's barrier, bounded by
// --timeout, finds every peer there. Under asp (and ssp with a large staleness) a fast worker can
// reach a meeting many steps, and far more than --timeout, ahead of a straggler, and the barrier
// alone cannot tell that straggler from a dead one. So each worker runs a small thread that every
// timeout/4, and at once when it reaches a meeting, sends every other worker a note (16 bytes on
// the trainer's Comm, tags::kPeerNotes; not the backend's, so the bytes reported per step
// do not hold them): the number of meetings it has reached and how long its trainer has been idle:
// since it began its last step, left a meeting or last showed a sign of life (zero while it waits
// at a meeting: a peer already at the next meeting waits for it). Before a meeting's barrier,
// await() waits until every peer's notes say it has reached that meeting, and throws a
// TimeoutError naming a peer that has not when
//  - nothing came from it for --timeout (SIGSTOP, dead, its process stuck), or
//  - its trainer began no step and showed no sign of life for --timeout (`--fault hang`, a trainer
//    thread asleep or blocked: its thread of notes still runs). Signs of life are
//    common/thread_pulse.h's, read at each note: the trainer thread's CPU clock advanced by at
//    least 1 % of the time since the previous note, or it sleeps as simulated work (a
//    --straggler's delay, working_until). So a single step (or an evaluation, a checkpoint
//    between meetings) longer than --timeout is waited for while it computes; a trainer thread
//    that spins forever is waited for as such a step is (docs/LIMITS.md).
// Silence counts only time await() itself was watching (common/watch_clock.h). The barrier that
// follows, with its usual timeout, stays the meeting: a note only lets the wait before it go on.
//
// Under the collective backends (ring, ring-p2p, mpi: GradientSync::can_watch_peers) it runs
// under synchronous training too, without meetings (TrainLoop::meet: the barriers alone, as
// before), and answers their waits inside a collective (PeerLiveness, peers_alive): a rank whose
// predecessor sent nothing for --timeout waits on while some peer's trainer showed a sign of life
// within the timeout (a straggler in a long step; the others wait in the collective, idle), and
// ends naming a peer whose notes stopped for the timeout (SIGSTOP, dead). When every peer is idle
// (`--fault hang`: its trainer asleep, the others blocked on it) the wait ends as before and the
// collective's census names the one not in it.
//
//   PeerWatch watch(workers, /*on=*/skew != 0);
//   watch.begin_step();  // each step
//   watch.await("the evaluation of epoch 1");  // then workers.barrier(...)
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/comm.h"
#include "common/peer_liveness.h"
#include "common/thread_pulse.h"

namespace starring {

class PeerWatch : public PeerLiveness {
 public:
  using Clock = std::chrono::steady_clock;

  // Off (no thread; await() returns at once) unless `on` and there is more than one worker.
  // Constructed on the trainer thread (whose CPU clock the notes read).
  PeerWatch(Comm& workers, bool on);
  ~PeerWatch() override;
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  bool enabled() const { return thread_.joinable(); }
  // The trainer thread began a step (a clock read and a relaxed store).
  void begin_step() {
    last_step_ns_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }
  // The trainer thread reached its next meeting (`what`, for the error: "the evaluation of epoch
  // 2"): tells the peers at once, and returns once every peer has reached it too. Reaching and
  // leaving a meeting count as beginning a step (a worker that waited long at one is not idle).
  void await(const std::string& what);
  // The trainer thread sleeps until `until` as simulated work (a --straggler's delay): not idle.
  void working_until(Clock::time_point until) { pulse_.working_until(until); }
  // PeerLiveness, for a wait inside a collective past its deadline (any thread; above).
  bool peers_alive(std::string* why) override;

 private:
  struct Heard {
    Clock::time_point at;       // when its last note arrived (moved forward by excused pauses)
    std::int64_t meetings = 0;  // meetings it had reached
    Clock::duration idle{};     // how long before that note its trainer had begun a step
  };
  void loop();
  void drain();
  void send_notes();

  Comm& comm_;
  const Seconds timeout_;
  const Clock::time_point start_;
  std::atomic<Clock::rep> last_step_ns_;
  std::atomic<std::int64_t> meetings_{0};
  std::atomic<bool> in_await_{false};  // its notes then say it is not idle

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, send_now_ = false;
  std::vector<Heard> heard_;  // by worker rank
  std::int64_t drains_ = 0;   // the thread's rounds (await() names no peer whose note is waiting)
  std::int64_t silent_recheck_ = -1;  // peers_alive: a silent peer is named at this drain,
  int silent_rank_ = -1;              // this one, while nothing more came from it since
  Clock::time_point silent_heard_at_{};
  std::string error_;  // the thread's failure, thrown by await()

  // the thread's own
  struct Note {
    std::int64_t v[2] = {0, 0};  // meetings reached, nanoseconds since the last step began
    std::unique_ptr<Request> req;
  };
  Note in_;
  std::list<Note> out_;  // sends in flight (a list: their buffers must not move)
  Clock::time_point last_sent_;
  ThreadPulse pulse_;            // the trainer thread's signs of life, read at each note
  Clock::time_point busy_at_{};  // when the last note found one
  std::thread thread_;
};

}  // namespace starring
