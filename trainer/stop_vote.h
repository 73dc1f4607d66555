// StopVote: the workers agree on the step after which a training run stops early - on SIGUSR1, a
// batch system's preemption notice, or `--fault stop:RANK:STEP` - so that every worker takes
// part in the same checkpoint and none waits for a peer that has already left.
//
// A signal reaches the workers at different steps (or reaches only some of them), so no worker
// may act on its own flag. After every `every`-th optimizer step t each worker sends its flag -
// whether it has seen a request so far - (one byte) to every other worker and leaves the round
// open; after step t + lag it waits for round t, and when any flag of round t was set, every
// worker stops after step t + lag: each decides on the same round at the same step. The lag
// keeps that wait free. Under synchronous training (skew 0) lag = 2: a worker finishes step
// t + 2 only with every peer's gradients of step t + 1, which a peer hands over after it sent
// round t. A backend that lets workers run `skew` steps ahead of the slowest (ps ssp:
// --staleness) gets lag = skew + 2. Under ps asp (unbounded skew) there is no vote: waiting for a
// straggler's round would bound asp's skew, which is what asp is measured for; a request there is
// reported and ignored.
//
// Cost per `every` steps and worker: W-1 one-byte sends and receives on the trainer's own Comm
// (not the backend's, so the bytes reported for gradient traffic are unchanged) and a wait that
// finds the round complete; the trainer votes every kStopVoteEvery steps, so a request stops the
// run at most kStopVoteEvery + lag - 1 steps after it arrived. The vote runs only when there is a
// checkpoint to write (--checkpoint-dir).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/gradient_sync.h"

namespace starring {

inline constexpr int kStopVoteEvery = 8;

class StopVote {
 public:
  // A round after every `every`-th step; lag < 0: no vote (after_step never stops, and says once
  // on stderr that a request is ignored, and why: `off_reason`).
  StopVote(Comm& workers, int lag, int every = kStopVoteEvery, std::string off_reason = "");
  ~StopVote();
  StopVote(const StopVote&) = delete;
  StopVote& operator=(const StopVote&) = delete;

  // A training run's: no vote without a checkpoint folder (nothing to save) or under asp.
  static int lag_for_run(bool checkpoints, int skew) {
    return checkpoints ? lag_for_skew(skew) : -1;
  }
  static std::string off_reason_for_run(bool checkpoints);

  bool enabled() const { return lag_ >= 0; }
  // Whether this worker has had a request (passed to after_step) while the vote was on.
  bool asked() const { return asked_; }
  // After optimizer step `step` (called after every step), with whether this worker has a request
  // (remembered once seen): true when the workers agreed to stop after this step (the same step
  // on every worker). Throws TimeoutError naming a silent peer.
  bool after_step(std::int64_t step, bool mine);
  // At the end of training (every worker at the same step): completes the rounds still open.
  void finish();
  // The round that decided and the workers whose flag it carried (once after_step returned true).
  std::int64_t decided_round() const { return decided_; }
  const std::vector<int>& requested_by() const { return requested_by_; }

 private:
  struct Round {
    std::int64_t step = 0;
    std::vector<unsigned char> in;  // one flag per peer
    std::vector<std::unique_ptr<Request>> reqs;
  };
  bool wait_round(Round& r);  // true when any flag of the round is set

  Comm& comm_;
  const int lag_, every_;
  const std::string off_reason_;
  bool asked_ = false, warned_ = false;
  std::deque<std::unique_ptr<Round>> open_;
  std::int64_t decided_ = -1;
  std::vector<int> requested_by_;
};

}  // namespace starring
