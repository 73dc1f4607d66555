// HostInterruptWait: on Ctrl-C, a rank ends only once the other ranks of its host have run their
// interrupt hooks (completed their --trace) or have ended (common/fault.h, InterruptBarrier).
//
// Why: Open MPI 4.1's mpirun passes SIGTERM to every rank and SIGKILLs the ranks of a host as
// soon as one of them has ended (measured: 15 ms after it; otherwise 1 s after SIGTERM), so the
// rank that wrote its trace first cut the others' short (a trace file missing in 3 of 4 stopped
// np 3 jobs, where the server's small trace is written first). Since traces stream to their
// .partial during the run, a rank cut short keeps its events up to the last flush, and closing
// takes only the last buffer; still, without this wait 1 of 11 stopped np 3 ps jobs (0.3-0.8M
// events a rank) left a rank's .partial short of its last buffer instead of the file, with it 0
// of 14 (2026-11-30). Why not a barrier: a rank that
// has already ended never arrives (one that called MPI_Abort, or was killed: mpirun then stops
// the others with the same SIGTERM), and waiting for it cost every failed job mpirun's whole
// second. So each rank tells its host's others it is done, and takes a peer as done when it
// says so or when its process has ended (a zombie counts as ended: mpirun does not reap while
// it waits out that second). Ranks of other hosts are not waited for: their own mpirun daemon
// stops them.
#pragma once
#include <mpi.h>
#include <sys/types.h>

#include <memory>
#include <vector>

#include "common/comm.h"
#include "common/fault.h"

namespace starring {

class HostInterruptWait {
 public:
  // Collective over `world`: a communicator of this host's ranks and their process ids; then,
  // while this object lives, an interrupted rank waits after its hook (at most `limit`) until
  // each of its host's other ranks has said it is done too or has ended.
  HostInterruptWait(MPI_Comm world, Seconds limit);
  ~HostInterruptWait();  // waits for a wait in progress (the process then ends)
  HostInterruptWait(const HostInterruptWait&) = delete;
  HostInterruptWait& operator=(const HostInterruptWait&) = delete;

 private:
  void wait();  // on the interrupt helper thread
  MPI_Comm host_ = MPI_COMM_NULL;
  int rank_ = 0;
  Seconds limit_;
  std::vector<pid_t> pids_;
  std::vector<int> heard_;  // receive buffers (wait() cancels what it leaves pending)
  std::unique_ptr<InterruptBarrier> barrier_;
};

}  // namespace starring
