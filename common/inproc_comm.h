// In-process transport: N ranks as threads of one process, so multi-rank algorithms can be
// tested without mpirun.
//
// Each rank owns a mailbox. A send copies its data straight into a matching posted receive if
// one exists, otherwise into an "unexpected" queue (eager, like MPI's small-message protocol),
// so a send completes at once. A receive takes the first matching unexpected message or waits
// in the posted list. Matching is by (source, tag) with kAnySource, in posting/arrival order,
// which gives MPI's non-overtaking rule. Waits use condition variables with deadlines.
//
//   run_ranks(4, [](Comm& c) { ... });   // 4 threads, rethrows the first rank's exception
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/comm.h"

namespace starring {

struct InProcState;  // shared mailboxes (inproc_comm.cc)

class InProcWorld {
 public:
  explicit InProcWorld(int n);
  ~InProcWorld();
  int size() const { return n_; }
  // The Comm of rank `rank` (one shared object per rank; valid while the world lives).
  std::shared_ptr<Comm> comm(int rank);
  // Makes every current and future wait on every rank throw Error("... aborted: <why>") instead
  // of waiting out its timeout (used when one rank of a test fails).
  void abort(const std::string& why);

 private:
  int n_;
  std::shared_ptr<InProcState> state_;
  std::vector<std::shared_ptr<Comm>> comms_;
};

// Runs fn on n threads, one per rank of a fresh InProcWorld whose comms have `timeout`. When a
// rank throws, the world is aborted (so the others stop waiting) and the first exception thrown
// is rethrown here after all threads have joined.
void run_ranks(int n, const std::function<void(Comm&)>& fn, Seconds timeout = Seconds(30));

}  // namespace starring
