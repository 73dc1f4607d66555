// Comm: the one transport interface. Point-to-point only (collectives are algorithms built on
// top, in allreduce/ and ps/). Implementations: MpiComm (wraps a duplicated MPI communicator,
// common/mpi_comm.h), InProcComm (N ranks as threads of one process, common/inproc_comm.h),
// SubComm (a subset of another Comm's ranks, renumbered, common/sub_comm.h).
//
// Rules every implementation keeps:
//  - Every wait has a deadline. On expiry it throws TimeoutError naming this rank, the peer,
//    the tag and the operation, e.g. "rank 1: timeout after 5.0 s in recv from rank 2 (tag 7)".
//  - Messages between one (source, dest, tag) are non-overtaking, as in MPI.
//  - Thread-safe: a backend's communication thread and the trainer thread may both use it.
//  - Bytes sent and received are counted (counters()) so every backend reports the same metric.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace starring {

using Seconds = std::chrono::duration<double>;

inline constexpr int kAnySource = -1;

// Outcome of a completed receive (for kAnySource receives, tells who sent it).
struct RecvStatus {
  int source = -1;
  std::size_t bytes = 0;
};

// A pending non-blocking operation. Destroying an unfinished request cancels it where the
// transport allows (receives), so abandoned requests never write into freed memory.
class Request {
 public:
  virtual ~Request() = default;
  virtual bool test() = 0;  // true once complete; never blocks
  // false only when test() would not complete now; never blocks and completes nothing (a
  // receive's bytes are counted by the test() that completes it). The default cannot tell.
  virtual bool may_be_done() { return true; }
  virtual RecvStatus wait(Seconds timeout) = 0;  // throws TimeoutError
  virtual RecvStatus status() const = 0;         // valid after completion
  // For an owner that gives up on this request as it fails (a wait timed out): a transport that
  // may still read or write its buffer after the request goes (MPI: a send released unfinished)
  // notes that buffer (note_left_to_mpi, common/kept_memory.h), so that the memory's owner keeps
  // it instead of freeing it under MPI. A complete request notes nothing; a receive is noted by
  // its own destructor when it cannot be cancelled. Never throws.
  virtual void note_if_unfinished() noexcept {}
};

struct CommCounters {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_recv = 0;
  std::uint64_t msgs_sent = 0;
  std::uint64_t msgs_recv = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's index among the ranks on its host (picks the GPU); = rank() in one process.
  virtual int node_rank() const { return rank(); }

  // Non-blocking. The buffer must stay valid until the request completes.
  virtual std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) = 0;
  // peer may be kAnySource. `bytes` is the capacity; the actual size is in status().bytes.
  virtual std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) = 0;

  // Blocking forms (isend/irecv + wait).
  void send(const void* buf, std::size_t bytes, int peer, int tag, Seconds timeout);
  RecvStatus recv(void* buf, std::size_t bytes, int peer, int tag, Seconds timeout);
  // Sends to `dst` and receives from `src` at once (a ring step).
  RecvStatus sendrecv(const void* sbuf, std::size_t sbytes, int dst, void* rbuf, std::size_t rbytes,
                      int src, int tag, Seconds timeout);

  virtual void barrier(Seconds timeout) = 0;

  // For a caller whose MPI collective on this communicator's transport was left pending (a
  // timeout: MPI can neither cancel nor free one): the transport then keeps its MPI communicator
  // allocated rather than free it under the collective. MpiComm marks itself (common/mpi_comm.h);
  // SubComm passes it to its parent, whose communicator carries its messages; a transport without
  // an MPI communicator ignores it. Never throws.
  virtual void collective_left_pending() noexcept {}

  // Default per-operation timeout configured for this communicator (--timeout).
  Seconds timeout() const { return timeout_; }
  void set_timeout(Seconds t) { timeout_ = t; }

  // Bytes and messages so far. A send is counted before the peer can receive it, so once a peer
  // has acted on a message (and, say, reached a barrier) the sender's count includes it; a
  // receive is counted when it completes.
  CommCounters counters() const;
  // A short "who am I" for error messages: "rank 3".
  std::string where() const;

 protected:
  void count_sent(std::size_t bytes);
  void count_recv(std::size_t bytes);

 private:
  Seconds timeout_{60.0};
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_recv_{0}, msgs_sent_{0}, msgs_recv_{0};
};

// Tags: each protocol owns a range so that concurrent protocols on one Comm never match each
// other's messages. Within a range a protocol may encode bucket / chunk numbers.
namespace tags {
inline constexpr int kBarrier = 1;
inline constexpr int kStartup = 97;  // experiments/main.cc: the start-up notes
inline constexpr int kArrival = 98;  // first_error's arrival notes (comm_util.h)
inline constexpr int kCensus = 99;   // common/census.h
// The trainer's and the commands' own exchanges: one tag each, listed here so that no two
// share one by accident.
inline constexpr int kTrainerBase = 100;
inline constexpr int kEvalSums = kTrainerBase + 1;        // trainer/evaluate.cc, counts to worker 0
inline constexpr int kRunTotals = kTrainerBase + 2;       // experiments/train_command.cc, to rank 0
inline constexpr int kCheckpointSums = kTrainerBase + 3;  // trainer/train_loop_checkpoint.cc
inline constexpr int kResume = kTrainerBase + 40;         // trainer/checkpoint_resume.cc
inline constexpr int kDataLoaded = kTrainerBase + 50;     // experiments/train_run.cc (first_error)
inline constexpr int kDataShape = kTrainerBase + 51;      // experiments/train_run.cc (+1)
inline constexpr int kStopVote = kTrainerBase + 60;       // trainer/stop_vote.cc
inline constexpr int kSetUp = kTrainerBase + 70;          // trainer/trainer.cc (first_error)
inline constexpr int kStepLosses = kTrainerBase + 80;     // trainer/step_losses.cc
inline constexpr int kPeerNotes = kTrainerBase + 85;      // trainer/peer_watch.cc
inline constexpr int kEnvReport = kTrainerBase + 90;      // experiments/env_command.cc
inline constexpr int kBenchOptions = kTrainerBase + 91;   // experiments/bench_agreement.cc (+1)
inline constexpr int kBenchMemory = kTrainerBase + 93;    // experiments/bench_agreement.cc (+1)
inline constexpr int kRingBase = 1 << 16;                 // allreduce/ (RingOptions::tag)
inline constexpr int kPsBase = 1 << 20;                   // ps/
inline constexpr int kBenchBase = 1 << 24;                // bench harness control messages
// The largest tag used. MPI itself promises only MPI_TAG_UB >= 32767: MpiComm's constructor refuses
// an MPI whose MPI_TAG_UB is below this one.
inline constexpr int kMaxTag = (1 << 28) - 1;
}  // namespace tags

}  // namespace starring
