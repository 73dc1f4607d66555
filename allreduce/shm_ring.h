// ShmRing: the ring all-reduce of ring_allreduce.h with a shared-memory data path, used when
// every rank of an MPI communicator sits on one node (host_comm, common/mpi_comm.h).
//
// Over MPI point-to-point on shared memory every message is copied twice (the sender into a
// shared FIFO, the receiver out of it) and a received segment is then read a third time by the
// reduction. Here each rank owns a small ring of `slots` in an MPI shared-memory window that its
// successor reads directly: the reduction reads the predecessor's slot and the input and writes
// the result straight into this rank's own slot (and the output, for a finished chunk), so a
// byte crosses between processes with one write and one read. The chunking and the 2(N-1) steps
// are exactly those of RingAllreduce; segments are segment_bytes clamped to 4 KiB..256 KiB (so
// they may be shorter or longer than RingAllreduce's), which changes no element's order of
// additions, so results are bit-identical.
//
// Flow control is a single-producer/single-consumer queue per neighbour pair: the producer
// publishes message m by a release-store of head = m+1 in its own window; the consumer frees it
// by a release-store of tail = m+1 in the producer's window. Each slot carries a small header
// (step, first element), so segments travel in the order they become ready - a reduced segment
// goes on at once instead of queueing behind the rest of the rank's own chunk - and the
// consumer handles them in arrival order (the schedule still fixes what is added to what, so
// results do not depend on the order). A rank never blocks on its successor while data is
// waiting for it: when no slot is free it reduces into the output and queues a copy for later,
// so the ring cannot deadlock. Queued copies go first; while segments to forward are still to
// come and every rank has a core, a rank keeps one slot free for the next and lets its own chunk
// hold at most half the slots, so that the copy is rarely needed (drain()). Every wait polls with a
// deadline and throws TimeoutError naming the peer. The destructor frees the window (collective)
// only when every rank votes that its ring did not fail; a rank whose ring failed votes and leaks
// the window at once, and a vote that does not complete within a deadline is left too, so a rank
// whose peer is gone never hangs here and can still abort.
#pragma once
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "allreduce/ring_allreduce.h"
#include "common/comm.h"

namespace starring {

class ShmRing {
 public:
  // Null when `comm` is not an MpiComm whose ranks all share one node, has one rank, or the wire
  // is not float32 (collective over `comm` when it is an MpiComm).
  static std::unique_ptr<ShmRing> create(Comm& comm, const RingOptions& opt);
  ~ShmRing();
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;

  // Same contract as RingAllreduce::run (float32 on the wire).
  void run(const float* in, float* out, std::size_t count, float scale);
  // Bytes and messages moved through the shared window so far.
  CommCounters counters() const;
  // A wait past the timeout asks `l` whether a peer is alive (ProgressWaiter); set between runs.
  void watch_peers(PeerLiveness* l) { liveness_ = l; }
  // The run is over on this rank (collective on the node's ranks): the vote and window free of
  // the destructor, its wait bounded by the Comm's timeout instead of a fixed grace. A rank that
  // is not there by then (stopped, stuck) gets a TimeoutError naming it (census); the window is
  // leaked, and the caller fails the job, whose MPI_Abort also ends any rank that went on to
  // free it. After a failed run(), or with `failed` (this rank fails elsewhere: a timeout in the
  // evaluation), it votes "failed" and leaks at once, without waiting. Idempotent.
  void close(bool failed = false);

 private:
  ShmRing(Comm& comm, const RingOptions& opt, MPI_Comm node);
  struct Pending {  // an outgoing message not yet copied into a slot
    const float* src;
    std::size_t n;
    std::uint64_t step, lo;  // its header
  };
  struct Header {
    std::uint64_t step, lo;
  };
  bool slot_free() const;
  float* my_slot(std::uint64_t m) const;
  void publish(std::uint64_t step, std::uint64_t lo);
  bool own_may_go();
  bool drain();
  void process(const float* in, float* out, float scale);
  void run_loop(const float* in, float* out, float scale);
  // The end-of-run vote and free (see ~ShmRing): false when the others' votes did not come
  // within `limit` (the window is then leaked).
  bool vote_and_free(Seconds limit);

  Comm& comm_;
  RingOptions opt_;
  int n_, rank_, next_, prev_;
  std::size_t slot_elems_, slots_;
  std::size_t slot_bytes_;  // one slot: its header, then slot_elems_ floats
  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  std::uint64_t* my_head_ = nullptr;    // messages I published (written by me)
  std::uint64_t* my_tail_ = nullptr;    // my messages consumed (written by my successor)
  std::uint64_t* prev_head_ = nullptr;  // messages my predecessor published
  std::uint64_t* prev_tail_ = nullptr;  // written by me: what I consumed of theirs
  float* my_slots_ = nullptr;
  const float* prev_slots_ = nullptr;
  std::uint64_t produced_ = 0, consumed_ = 0;
  std::size_t count_ = 0, seg_total_ = 0, seg_done_ = 0;  // this run: segments to receive
  std::deque<Pending> pending_;         // forwards that found no free slot (they go first)
  std::deque<Pending> own_;             // this rank's own chunk (step 0), not yet in a slot
  std::deque<std::uint64_t> own_sent_;  // messages of own_ published, maybe not yet consumed
  std::size_t own_cap_ = 0;             // at most this many of those in flight (own_may_go)
  std::size_t keep_free_ = 0;           // slots drain() leaves free for reduced segments
  std::size_t fwd_left_ = 0;            // this run: messages still to receive and forward
  bool failed_ = false;
  PeerLiveness* liveness_ = nullptr;
  bool closed_ = false;  // close() ran: the destructor has nothing left to do
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_recv_{0}, msgs_sent_{0}, msgs_recv_{0};
};

}  // namespace starring
