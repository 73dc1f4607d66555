// GradientSync: the seam between the trainer and a synchronization backend.
//
// The trainer owns the model's flat parameter and gradient buffers (see ParamLayout, tensors in
// backward order). Each step it:
//   1. calls begin_step(step, lr);
//   2. runs backward; as soon as tensor i's gradient is final it calls tensor_ready(i)
//      (i = 0, 1, 2, ... in backward order). The gradient is the worker's gradient of its MEAN
//      local loss; every worker has the same local batch size, so the backend's job is to
//      AVERAGE over workers (sum, then scale by 1/W) - which equals normalising by the global
//      batch - and to apply the optimizer;
//   3. before the next forward pass uses tensor i it calls wait_params(i): on return the
//      parameters of tensor i are the updated ones, identical on every worker under synchronous
//      consistency (forward uses tensors last-to-first in backward order, i.e. first layer first);
//   4. flush() waits for everything outstanding (before evaluation, checkpoints, the end).
//
// The backend may work in the background between these calls (a communication thread), which is
// how communication overlaps the rest of backward and the next forward. The trainer never knows
// which backend it holds.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/optimizer.h"
#include "common/param_layout.h"
#include "common/peer_liveness.h"

namespace starring {

class Device;

// Where the trainer's flat buffers live.
struct SyncBuffers {
  float* params = nullptr;   // ParamLayout::total() floats
  float* grads = nullptr;    // same layout
  bool on_device = false;    // true: GPU memory (only backends with accepts_device_buffers())
  Device* device = nullptr;  // the Device that owns the buffers (for GPU backends)
};

// Per-step communication statistics a backend reports; the trainer adds its own compute and
// wait timing and writes them to the metrics file.
struct SyncStepStats {
  double comm_s = 0;  // time the backend spent moving/reducing data (may overlap compute)
  // The backend's own count of the time its caller was blocked in wait_params()/flush(). The
  // trainer times its waits itself and does not read this (tests do).
  double wait_s = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_recv = 0;
  // Backend-specific seconds or counts, summed over steps by the trainer: "push_s", "pull_s"
  // (ps), "optimizer_s" (ring/mpi/nccl), ... (the ps staleness histogram is not here: the
  // servers report it, Backend::stats in experiments/backend_registry.h).
  std::map<std::string, double> extra;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // Called once before training, on every worker, with identical initial parameters (the model
  // is initialised from the same seed). Backends may broadcast/verify them.
  virtual void start(const ParamLayout& layout, SyncBuffers buffers,
                     const OptimizerConfig& opt) = 0;

  // The per-step calls (numbered above). Each may throw the backend's failure: a TimeoutError
  // naming a silent peer, or an Error a peer reported; the caller then calls shutdown() before
  // the buffers go (Trainer::run does), since a communication thread may still write into them.
  virtual void begin_step(std::int64_t step, float lr) = 0;
  virtual void tensor_ready(std::size_t backward_index) = 0;
  virtual void wait_params(std::size_t backward_index) = 0;
  virtual void flush() = 0;

  // Statistics accumulated since the previous call (one call per step).
  virtual SyncStepStats take_stats() = 0;

  // Clean shutdown (tells servers to stop, joins threads). Idempotent.
  virtual void shutdown() = 0;

  // Instead of start(): the trainer could not set up, on this worker or another (the workers
  // agree on that first, trainer.cc). A backend whose peers wait elsewhere for the start (dedicated
  // parameter servers, which are no workers) tells them `why`, so that they stop at once instead
  // of at their --timeout. After it the backend is shut down. Default: nothing to tell.
  virtual void abandon(const std::string& why) { (void)why; }

  // After start(): a wait of the trainer's on the other workers (a barrier) timed out. A worker
  // that waits on other ranks too (parameter servers) may have stopped because one of those did
  // not answer, and the barrier would name that worker. The backend checks its own peers: it
  // throws an error naming one that failed (a failure it knows of, or one that does not answer
  // now), and returns when all answer (the caller then reports its timeout). Default: none.
  virtual void check_peers() {}

  // Checkpoints (trainer/checkpoint.h). The optimizer state lives where the optimizer runs (every
  // worker for ring/mpi/local, the server shards for ps), so the backend gathers and restores it.
  // save_optimizer_state: called on every worker after flush() on all of them (the trainer puts
  // a barrier in between); on worker 0 it fills s1 (momentum / Adam m) and s2 (Adam v; empty for
  // sgd) with the state over the whole flat buffer; elsewhere it may leave them empty. A backend
  // whose master parameters live elsewhere (ps) also refreshes worker 0's parameter buffer from
  // them, so the trainer reads the parameters after this call.
  // load_optimizer_state: called on every worker after start(), before the first begin_step of
  // the resumed run, with identical content; the trainer barriers after it.
  virtual void save_optimizer_state(std::vector<float>& s1, std::vector<float>& s2) {
    (void)s1, (void)s2;
    throw Error("checkpoints are not supported by backend '" + name() + "'");
  }
  virtual void load_optimizer_state(const std::vector<float>& s1, const std::vector<float>& s2) {
    (void)s1, (void)s2;
    throw Error("checkpoints are not supported by backend '" + name() + "'");
  }

  // Before an evaluation, on every worker, after flush() on all of them and a barrier: a backend
  // whose workers may hold different copies of the parameters (ps under asp/ssp: each worker
  // has its last reply, which lags the pushes applied after it) makes this worker's parameter
  // buffer the current master copy, so that every worker evaluates the same, latest model.
  virtual void refresh_params() {}

  // How many optimizer steps a worker may run ahead of the slowest: 0 for synchronous training,
  // the staleness bound under ps ssp, -1 when unbounded (ps asp). Sets lag_for_skew (below).
  virtual int max_step_skew() const { return 0; }

  // While on, the trainer waits at a meeting of the workers for a slower one (asp/ssp,
  // trainer/peer_watch.h): a backend whose peers name a worker that sends nothing for the timeout
  // (ps: the servers) tells them it is alive meanwhile (ps: heartbeats, as while it waits for a
  // reply). Called from the trainer thread.
  virtual void waiting_for_workers(bool on) { (void)on; }

  // The trainer thread is about to sleep until `until` as simulated work (a --straggler's delay,
  // which stands for a slow computation): a backend that vouches for a live trainer to its peers
  // (ps under asp/ssp: common/thread_pulse.h) counts it as alive meanwhile. Trainer thread.
  virtual void working_until(std::chrono::steady_clock::time_point until) { (void)until; }

  // Whether the backend's waits inside a collective can ask the trainer whether the peers are
  // alive before they time out (BucketSync over ring / ring-p2p / mpi): the trainer then runs
  // its PeerWatch under synchronous training too and hands it over with watch_peers, from the
  // trainer thread, before start() (and nullptr once the run is over, before it goes). A live
  // straggler in a step longer than --timeout is then waited for inside the collective, and a
  // peer that is stopped, dead or stuck still named (common/peer_liveness.h).
  virtual bool can_watch_peers() const { return false; }
  virtual void watch_peers(PeerLiveness* liveness) { (void)liveness; }

  // True when the backend works on GPU buffers directly (nccl); others get host buffers.
  virtual bool accepts_device_buffers() const { return false; }
  virtual std::string name() const = 0;
};

// How many steps after step t a message that every worker sends the trainer's peers after step t
// is sure to have arrived, so that waiting for it then costs nothing: 2 under synchronous
// training (a worker ends step t + 2 only with every peer's gradients of step t + 1, which a peer
// hands over after it sent its step-t message), skew + 2 when workers may run `skew` steps ahead
// of the slowest (GradientSync::max_step_skew), -1 (never: no wait) when unbounded. The stop vote
// (trainer/stop_vote.h) and the metrics file's gathering of every worker's loss
// (trainer/step_losses.h) wait that long.
inline int lag_for_skew(int skew) { return skew < 0 ? -1 : skew + 2; }

}  // namespace starring
