// Ring all-reduce on host memory over a Comm.
//
// The buffer of `count` floats is cut into N chunks (N = ranks; chunk boundaries rounded down to
// 16 floats so the reduction loops stay aligned; any chunk may be empty). Every chunk is cut
// into segments of `segment_bytes` (of float data). The algorithm runs 2(N-1) steps:
//
//   reduce-scatter, t = 0..N-2: rank r receives from r-1 the partial sum of chunk (r-t-1) and
//     adds its own input: out = in + received. After step N-2 rank r holds chunk (r+1) summed
//     over all ranks (scaled by `scale` in that last addition, so averaging costs no pass).
//   all-gather, t = N-1..2N-3: rank r receives the finished chunk (r-t-1) straight into `out`.
//
// Every received segment is forwarded to r+1 (as step t+1) as soon as it has been reduced, so
// steps are pipelined segment by segment: a segment flows around the ring while the next one is
// still arriving, and sending, receiving and reducing overlap (long reductions are cut into
// pieces with a progress call in between, since MPI moves data only inside MPI calls). Up to
// `window` receives are pre-posted; reduce-scatter segments land in a small reused scratch
// (cache-resident) and are reduced from there straight into the output (out = in + scratch:
// the input is never copied to the output first), then sent on from the output while still in
// cache. All-gather segments are received straight into the output and forwarded from there.
// A send never reads from a reused buffer: a slot is only received into, so no rank ever waits
// for its successor before it can post a receive (which could deadlock around the ring). Each
// rank sends and receives 2(N-1)/N of the buffer.
//
// A receive into memory that an earlier send of the run read from is posted only once that
// send's request has completed (the transport owns a send buffer until then, and a receive
// buffer until the receive completes): a chunk's all-gather receive (step t + N) waits for the
// send of its reduce-scatter partial sum (step t, which also ran first), and the receive of this
// rank's own finished chunk (step N-1) for the first sends when they read the same memory (in
// place, or the half-wire staging). Those data are computed from that send further round the
// ring, so they cannot arrive sooner: holding the receive back costs a test, not a wait. Later
// receives are posted in order behind it (matching is in posting order).
//
// With a half-precision wire (fp16/bf16) segments are narrowed before sending (into a staging
// buffer of count halves), widened and accumulated in float32 on arrival; the owner of a
// finished chunk keeps the narrowed value too, so every rank ends with bit-identical results.
//
// All messages of one run use one tag; messages between two ranks are matched in order (Comm's
// non-overtaking rule), and both sides walk the same (step, segment) sequence. A wait that makes
// no progress within the timeout (for a receive, or at the end for the last sends to complete)
// throws TimeoutError naming this rank, the peer and the step, with a census of the ranks stuck
// too (allreduce/progress_waiter.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "allreduce/wire_codec.h"
#include "common/comm.h"
#include "common/kept_memory.h"
#include "common/peer_liveness.h"

namespace starring {

struct RingOptions {
  std::size_t segment_bytes = 1 << 20;  // float bytes per pipelined segment
  WireType wire = WireType::kFloat32;
  int window = 4;             // receives kept posted ahead
  int tag = tags::kRingBase;  // one tag per concurrent all-reduce on a Comm
  Seconds timeout{60.0};      // max time without progress
  bool shared_memory = true;  // make_ring_allreducer: use ShmRing when all ranks share a node
  int spin_us = 0;  // poll this long after the last progress before yielding (ProgressWaiter)
  // ShmRing's slots per rank, in bytes; 0: 2 MiB, 16 MiB when ranks outnumber cores. Tests set
  // it small so that the slots wrap at every rank count without hundreds of MB.
  std::size_t shm_ring_bytes = 0;
};

// The schedule both ring implementations follow. Chunk c of N covers
// [ring_chunk_begin(c), ring_chunk_begin(c + 1)); rank `rank` receives, in this order, the
// segments listed by ring_receives (step t: chunk (rank - t - 1) mod N, cut into segments of
// seg_elems). It sends its own chunk first (step 0), then forwards every received segment of
// steps 0..2N-4 in the order received.
struct RingItem {
  int step;
  std::size_t lo, hi;  // element range in the buffer
};
std::size_t ring_chunk_begin(int c, int n, std::size_t count);
std::vector<RingItem> ring_receives(int rank, int n, std::size_t count, std::size_t seg_elems);

class RingAllreduce {
 public:
  RingAllreduce(Comm& comm, RingOptions opt);

  // out[i] = scale * sum over ranks of in[i] for i < count, on every rank. in == out is allowed
  // (in place); otherwise the buffers must not overlap. count may be 0.
  void run(const float* in, float* out, std::size_t count, float scale = 1.0f);

  // Wire bytes this rank sends (= receives) in one run on `count` floats.
  std::uint64_t wire_bytes_per_run(std::size_t count) const;
  // A wait past the timeout asks `l` whether a peer is alive (ProgressWaiter); set between runs.
  void watch_peers(PeerLiveness* l) { liveness_ = l; }

 private:
  using Item = RingItem;
  std::size_t chunk_begin(int c, std::size_t count) const { return ring_chunk_begin(c, n_, count); }
  void post_initial_sends(const float* in, std::size_t count);
  void post_receives(float* out);
  void move_data(const float* in, float* out, std::size_t count, float scale);  // run()'s loops
  void plan_reuse(bool aliased_first_sends, std::size_t count);
  bool buffer_free(std::size_t k);
  std::string waiting_for() const;
  std::string unfinished_send(std::size_t s) const;
  void process(std::size_t k, const float* in, float* out, float scale);
  void poke();
  template <typename F>
  void in_pieces(std::size_t n, F&& f);

  Comm& comm_;
  RingOptions opt_;
  int n_, rank_, next_, prev_;
  std::size_t seg_elems_;
  std::size_t slot_elems_ = 0;  // this run: the longest reduce-scatter segment (<= seg_elems_)
  std::vector<Item> items_;
  // Receive targets, kept rather than freed where a receive let go may still write
  // (common/kept_memory.h); declared before recvs_, which is destroyed first.
  ReceiveVector<unsigned char> scratch_;  // window x slot_elems_ (wire type): reduce-scatter
  ReceiveVector<unsigned char> stage_;    // half wire: count elements, what is sent and gathered
  std::vector<std::unique_ptr<Request>> recvs_;  // per item; [head_, posted_) pending
  std::size_t head_ = 0, posted_ = 0;
  std::vector<std::unique_ptr<Request>> sends_;  // this run's from send_base_ (first sends, then
  std::size_t send_base_ = 0;                    // one per item forwarded, in item order)
  std::size_t first_sends_ = 0;                  // this run's first sends (its own chunk)
  std::vector<std::ptrdiff_t> reuses_;  // per item: the send whose memory it receives into, or -1
  PeerLiveness* liveness_ = nullptr;
};

}  // namespace starring
