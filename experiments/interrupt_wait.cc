// HostInterruptWait (interrupt_wait.h): "done" messages on a communicator of this host's ranks, and
// /proc for whether a peer's process has ended.
#include "experiments/interrupt_wait.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace starring {
namespace {

constexpr int kDoneTag = 1;
const int kDone = 1;  // the send buffer: sends to a peer that has ended stay pending

// False once the process has ended (gone, or a zombie its parent has not reaped yet).
bool running(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return ::kill(pid, 0) == 0 || errno == EPERM;
  const std::size_t name_end = stat.rfind(')');  // "pid (comm) S ...": comm may hold anything
  if (name_end == std::string::npos || name_end + 2 >= stat.size()) return true;
  const char state = stat[name_end + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

HostInterruptWait::HostInterruptWait(MPI_Comm world, Seconds limit) : limit_(limit) {
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host_);
  int n = 1;
  MPI_Comm_rank(host_, &rank_);
  MPI_Comm_size(host_, &n);
  pids_.resize(static_cast<std::size_t>(n));
  heard_.resize(static_cast<std::size_t>(n));
  const pid_t mine = ::getpid();
  static_assert(sizeof(pid_t) == sizeof(int));
  MPI_Allgather(&mine, 1, MPI_INT, pids_.data(), 1, MPI_INT, host_);
  if (n > 1) barrier_ = std::make_unique<InterruptBarrier>([this] { wait(); });
}

HostInterruptWait::~HostInterruptWait() {
  barrier_.reset();
  MPI_Comm_free(&host_);
}

void HostInterruptWait::wait() {
  const auto deadline = std::chrono::steady_clock::now() + limit_;
  const int n = static_cast<int>(pids_.size());
  std::vector<MPI_Request> recvs(static_cast<std::size_t>(n), MPI_REQUEST_NULL);
  for (int r = 0; r < n; ++r) {
    if (r == rank_) continue;
    MPI_Request send;
    MPI_Isend(&kDone, 1, MPI_INT, r, kDoneTag, host_, &send);
    MPI_Request_free(&send);
    MPI_Irecv(&heard_[static_cast<std::size_t>(r)], 1, MPI_INT, r, kDoneTag, host_,
              &recvs[static_cast<std::size_t>(r)]);
  }
  std::vector<bool> settled(static_cast<std::size_t>(n), false);
  settled[static_cast<std::size_t>(rank_)] = true;
  for (;;) {
    bool all = true;
    for (int r = 0; r < n; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (settled[i]) continue;
      int said = 0;
      MPI_Test(&recvs[i], &said, MPI_STATUS_IGNORE);
      settled[i] = said || !running(pids_[i]);
      all = all && settled[i];
    }
    if (all || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Receives still posted (a peer that ended, or the deadline) are cancelled, so no late "done"
  // lands in heard_ after this object is gone. A cancelled receive completes locally: the wait
  // returns whatever the peers do (MPI 4.0, 3.8.4).
  for (MPI_Request& r : recvs) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
}

}  // namespace starring
