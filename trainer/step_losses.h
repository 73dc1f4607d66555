// StepLosses: every worker's loss of each step, gathered on worker 0 for the metrics file without
// a wait on the step's path (--metrics-loss all, the default, with a --metrics-file).
//
// After each optimizer step every other worker sends worker 0 the step and its loss (16 bytes) on
// the trainer's own Comm (not the backend's: the gradient bytes reported are unchanged) and goes
// on. Worker 0 keeps the step's metrics line with one receive per other worker and writes it once
// every worker's loss of that step has come, with
//   global_loss      the mean over the workers: the global batch's loss (equal local batches);
//   loss_min, loss_max, loss_max_worker  (the worker with the highest loss, the lowest on a tie;
//                    a worker whose loss is not a number counts as the highest).
// Lines are written in step order, each `lag` steps late: after step t + lag worker 0 waits for
// step t's receives, not testing them before (a test makes MPI progress on the compute thread:
// costly beside the backend's communication thread, see write_ready). Under synchronous training
// (lag 2) that wait finds the losses there: worker 0 ends step t + 2 only with every peer's
// gradients of step t + 1, which a peer hands over after it sent step t's loss. A backend whose
// workers run `skew` steps ahead of the slowest (ps ssp) gets lag = skew + 2; under asp (unbounded)
// no wait in the loop: the receives are tested after each step, and lines not complete wait for the
// next drain() (waiting would bound asp's skew).
//
// drain(): every worker, after a barrier of the workers (evaluation, checkpoint, the end of the
// run): worker 0 waits for every loss still to come and writes the lines, the others for their
// sends. Every wait is bounded by the Comm's timeout (--timeout); a silent peer ends it with a
// TimeoutError naming the peer and the step. Destroyed with sends unfinished (an error unwound
// the run), a worker waits for them at most 1 s (--timeout, if shorter) and keeps the buffers of
// any still unfinished until the process ends: never freed under MPI, never a hang.
//
// Cost per step: W-1 16-byte messages to worker 0, waited for `lag` steps later, when synchronous
// training has delivered them (docs/RESULTS.md, *Every worker's loss in the metrics file* and
// *Do the figures add up*).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/comm.h"
#include "trainer/metrics.h"

namespace starring {

class StepLosses {
 public:
  // on: gather (every worker must pass the same); off, or one worker: worker 0's lines are
  // written at once (with the fields when on, from its own loss alone). lag < 0: no wait in the
  // loop. `metrics` is worker 0's writer (disabled elsewhere).
  StepLosses(Comm& workers, MetricsWriter& metrics, bool on, int lag);
  ~StepLosses();
  StepLosses(const StepLosses&) = delete;
  StepLosses& operator=(const StepLosses&) = delete;

  // After step `step` on every worker, with its loss; worker 0 passes the step's metrics line.
  void after_step(std::int64_t step, double loss, MetricsLine line);
  // See above. Throws TimeoutError naming a silent peer.
  void drain();
  // Lines worker 0 holds, waiting for other workers' losses (tests).
  std::size_t held() const { return held_.size(); }

  // The destructor's wait for unfinished sends, all together (or --timeout, if shorter).
  static constexpr Seconds kGiveUpAfter{1.0};

 private:
  struct Held {
    std::int64_t step = 0;
    MetricsLine line;
    std::vector<double> in;  // per worker: step, loss (worker 0's own filled at once)
    std::vector<std::unique_ptr<Request>> reqs;  // after `in`: destroyed (cancelled) first
  };
  struct Sent {
    double msg[2] = {0, 0};
    std::unique_ptr<Request> req;
  };
  void write_ready(std::int64_t step);  // writes held lines that are complete (waits: see lag)
  void complete(Held& h);               // waits for h's receives (bounded)
  void write(Held& h);

  Comm& comm_;
  MetricsWriter& metrics_;
  const bool fields_;  // the line gets the fields (--metrics-loss all)
  const bool on_;      // and the workers send their losses (several workers)
  const int lag_;
  std::deque<std::unique_ptr<Held>> held_;
  std::deque<std::unique_ptr<Sent>> sent_;
};

}  // namespace starring
