// Injected faults (--fault kill:RANK:STEP | hang:RANK:STEP) announce themselves on stderr just
// before the rank dies or goes silent, with the host's wall clock, so a sweep can measure how long
// the rest of the job takes to notice and end (scripts/starring_results.py, fault_outcome):
//   [starring] rank 1: --fault kill at step 20 (unix time 1764430000.123456)
//   [starring] server rank 4: --fault hang: going silent at step 20 (unix time 1764430000.123456)
#pragma once
#include <cstdint>
#include <string>

namespace starring {

// `who`: "rank 1" / "server rank 4"; `kind`: "kill" or "hang".
void announce_fault(const std::string& who, const std::string& kind, std::int64_t step);

// SIGINT, SIGTERM and SIGHUP (Ctrl-C, mpirun passing one on, a batch system's time limit) print
// one line on stderr, then end the process by the same signal as before, so the exit status
// still says which signal it was:
//   starring: rank 0: stopped by SIGINT; checkpoints written so far are whole, metrics stay in
//   FILE.partial
// Only where `announce` is true (rank 0: mpirun signals every rank at once).
void announce_interrupts(bool announce, int rank);

}  // namespace starring
