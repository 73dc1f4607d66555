// The parameter server's push/pull message pattern, single-threaded, for smpi_bench: SMPI ranks
// cannot run the PsWorker/ServerLoop communication threads, so this stand-in moves the same
// chunks between the same ranks in the same order under bsp.
//
// Shared with the real code: the roles (ps::make_ps_group: dedicated servers are the last S
// ranks; co-located, every rank is a worker and a shard) and the chunks (ps::make_plan with the
// range slicer and --ps-chunk-bytes, the whole buffer one bucket). One run() is one push + pull:
//  - every rank posts its receives first: a server one per (chunk it owns, remote worker), a
//    worker one per reply of a chunk another rank owns;
//  - a worker sends each server its chunks in plan order, one at a time (the next when the
//    previous has gone, as messages follow one another on an MPI connection), all servers side
//    by side; a co-located rank's chunks for its own shard are copied, not sent;
//  - a server sums a chunk's W pushes in worker order once all are in and sends the sum to every
//    remote worker (its own worker, co-located, gets a copy).
// One event loop (MPI_Waitany over every outstanding request) drives both roles, so a co-located
// rank serves while it pushes. Left out: the optimizer (the bench's servers run "sum"), headers,
// control messages and the threads.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <vector>

#include "ps/partition.h"
#include "ps/ps_group.h"

namespace starring {

class PsPattern {
 public:
  PsPattern(MPI_Comm world, const ps::PsGroup& group, std::size_t chunk_bytes, std::size_t count);
  // One push of `in` and pull of the sum over workers into `out` (workers; a dedicated server
  // passes its buffers too and they are not touched).
  void run(const float* in, float* out);

 private:
  enum class Kind { kPush, kReply, kSend, kReplySend };
  struct Pending {
    Kind kind;
    int a = 0;  // kPush: index into mine_; kSend: server index
  };
  void post(Kind kind, int a, MPI_Request r);
  void push_next(int server, const float* in);
  void finish_chunk(std::size_t k, float* out);

  MPI_Comm world_;
  ps::PsGroup g_;
  int rank_ = 0, worker_ = -1, server_ = -1;
  PsPlan plan_;
  std::vector<int> mine_;                   // chunks this rank's server owns
  std::vector<std::vector<float>> pushes_;  // [k * W + w]: worker w's push of chunk mine_[k]
  std::vector<int> arrived_;                // per chunk of mine_, pushes in
  std::vector<std::size_t> next_;           // per server, the next of its chunks to send
  std::vector<MPI_Request> reqs_;
  std::vector<Pending> pending_;
};

}  // namespace starring
