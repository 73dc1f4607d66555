// PeerLiveness: whether a wait inside a collective that made no progress for --timeout should go
// on because a peer is alive but slow (a straggler's step longer than --timeout), or end, naming
// the peer that is not alive.
//
// A ring rank waits only for its neighbours' data, and a neighbour that waits itself further up
// the ring makes no progress either: progress alone cannot tell a live straggler from a dead one.
// The trainer's PeerWatch (trainer/peer_watch.h) hears every other worker's notes (every
// --timeout/4, from a thread of their own, saying how long their trainer thread has been idle:
// common/thread_pulse.h's signs of life), and answers for the collective backends' waits
// (allreduce/progress_waiter.h, BucketSync's wait for a bucket). Those ask only once a wait is
// past its deadline, every ~10 ms, so a normal run never asks.
#pragma once
#include <string>

namespace starring {

class PeerLiveness {
 public:
  virtual ~PeerLiveness() = default;
  // Any thread. True: every peer was heard from within the timeout and at least one peer's
  // trainer showed a sign of life within it (the wait goes on; ask again later). False: the wait
  // ends; `why` is then "" (no peer's trainer is alive: the caller's own census names the one
  // stuck elsewhere) or a clause naming the rank ("rank 1 sent nothing for 2.1 s (...)").
  virtual bool peers_alive(std::string* why) = 0;
};

}  // namespace starring
