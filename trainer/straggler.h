// Injected slowness and faults: the straggler study (--straggler) and the fault tests (--fault).
//
//   RANK:MS   worker RANK sleeps MS milliseconds on every step, between the last micro-batch's
//             forward and its backward (before it hands over any gradient): a persistent
//             straggler. Every consistency model ends up at the straggler's pace (SSP lets the
//             others run at most --staleness clocks ahead, then they wait too).
//   any:MS    on every step ONE worker, drawn at random from (seed, step) - the same draw on
//             every rank - sleeps MS milliseconds: transient delays that move around, the kind
//             production clusters see (GC pauses, noisy neighbours). A synchronous step waits
//             for whoever is slow, so BSP and the ring pay MS on every step; each worker is slow
//             on only 1/W of the steps, so SSP with enough staleness pays about MS/W per step.
#pragma once
#include <cstdint>
#include <string>

#include "common/fault.h"

namespace starring {

class Straggler {
 public:
  // Parses the spec (empty: no straggler); throws ConfigError naming --straggler on bad input.
  Straggler(const std::string& spec, std::uint64_t seed, int workers);

  // Milliseconds worker `rank` sleeps at optimizer step `step` (0: none).
  long delay_ms(int rank, std::int64_t step) const;

 private:
  bool any_ = false;
  int rank_ = -1;
  long ms_ = 0;
  std::uint64_t seed_ = 0;
  int workers_ = 1;
};

// --fault kill:RANK:STEP | hang:RANK:STEP: at optimizer step STEP, worker RANK says so on stderr
// and dies by SIGKILL (kill) or goes silent for a day (hang), so the others' timeouts and the
// launcher's handling can be tested. --fault stop:RANK:STEP: from step STEP on, worker RANK acts
// as if it had received SIGUSR1 (a preemption notice, trainer/stop_vote.h) - only that worker,
// which a signal from mpirun never is.
class FaultInjector {
 public:
  // Parses the spec (empty: no fault); throws ConfigError naming --fault on bad input.
  explicit FaultInjector(const std::string& spec);
  // kill/hang on worker `rank` at `step`: announces it (common/fault.h), then raises SIGKILL or
  // sleeps 24 hours; returns at once otherwise (and always for stop).
  void at_step(int rank, std::int64_t step) const;
  // stop:RANK:STEP: true on worker `rank` from `step` on.
  bool stop_requested(int rank, std::int64_t step) const {
    return f_.kind == "stop" && rank == f_.rank && step >= f_.step;
  }

 private:
  FaultSpec f_;
};

}  // namespace starring
