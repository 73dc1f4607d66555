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

}  // namespace starring
