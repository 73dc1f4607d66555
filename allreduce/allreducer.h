// Allreducer: one all-reduce engine behind one small interface, so the trainer backend
// (BucketSync), the bench adapters and the tests are written once for every engine:
//   ring - the ring all-reduce on host memory: ShmRing (allreduce/shm_ring.h, an MPI shared-
//          memory window between neighbours) when every rank is on one node and the wire is
//          float32, otherwise RingAllreduce over the Comm (allreduce/ring_allreduce.h);
//   mpi  - Open MPI's own all-reduce on the MpiComm's communicator (the vendor baseline);
//   nccl - ncclAllReduce on device memory (allreduce/nccl/, a stand-in without NCCL).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "allreduce/ring_allreduce.h"
#include "common/comm.h"
#include "common/peer_liveness.h"

namespace starring {

class Device;

class Allreducer {
 public:
  virtual ~Allreducer() = default;
  virtual std::string name() const = 0;
  // out[i] = scale * (sum over ranks of in[i]), i < count, on every rank; in == out allowed.
  // Pointers are host memory, or device memory when on_device().
  virtual void run(const float* in, float* out, std::size_t count, float scale) = 0;
  virtual bool on_device() const { return false; }
  // Bytes moved so far by this rank when the transport counts them (the Comm's counters);
  // nullopt for opaque transports (MPI collectives, NCCL).
  virtual std::optional<CommCounters> counters() const { return std::nullopt; }
  // Bytes this rank sends per run on `count` floats: measured-equivalent for the ring,
  // the ring's 2(N-1)/N * count * 4 as a reference for opaque engines.
  virtual std::uint64_t wire_bytes(std::size_t count) const = 0;
  // The run is over on this rank: release what it shares with its peers, waiting at most the
  // timeout for them (throws TimeoutError naming the one that is not there). `failed`: this rank
  // is failing (an exception is being handled): give up what is shared at once, without waiting
  // for the peers, and do not throw. Optional: the destructor releases it too, with a longer
  // fixed grace.
  virtual void close(bool /*failed*/) {}
  // Whether the engine's waits can ask a PeerLiveness before they time out (ring; mpi when
  // non-blocking), so that a live peer in a step longer than the timeout is waited for; and the
  // one to ask (nullptr: none), set while no run() is in progress.
  virtual bool can_watch_peers() const { return false; }
  virtual void watch_peers(PeerLiveness* /*liveness*/) {}
};

// The reference wire bytes of an opaque engine (MPI collectives, NCCL): what the ring sends per
// rank on `count` floats over `ranks` ranks, 2(N-1)/N * count * 4 (0 for one rank).
std::uint64_t reference_wire_bytes(int ranks, std::size_t count);

// The ring over `comm` (the allreducer holds it); opt.shared_memory = false keeps it on the Comm
// even where ShmRing could be used. Collective (ShmRing sets up a window).
std::unique_ptr<Allreducer> make_ring_allreducer(std::shared_ptr<Comm> comm, RingOptions opt);

// How the mpi engine calls Open MPI.
enum class MpiMode {
  // MPI_Allreduce: the vendor's tuned collective; a silent peer blocks it for good (bench bounds
  // each iteration at --timeout + 10 s: common/stall_watch.h)
  kBlocking,
  kNonBlocking  // MPI_Iallreduce + MPI_Test polling: honours the timeout
};
// Throws ConfigError when `comm` is not an MpiComm (in-process tests, sub-communicators).
std::unique_ptr<Allreducer> make_mpi_allreducer(std::shared_ptr<Comm> comm, MpiMode mode,
                                                Seconds timeout);

// ncclAllReduce on device buffers of `device` (a GPU Device). The unique id is sent from rank 0
// to every rank over `comm`. force_ring sets NCCL_ALGO=Ring before the communicator is created.
// Without NCCL in the build, throws ConfigError("... built without NCCL").
std::unique_ptr<Allreducer> make_nccl_allreducer(std::shared_ptr<Comm> comm, Device* device,
                                                 bool force_ring, Seconds timeout);

}  // namespace starring
