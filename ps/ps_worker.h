// PsWorker: the worker side of the parameter-server backend (a GradientSync).
//
// Each step the trainer hands over buckets of gradient (tensor_ready completes a bucket, in
// backward order); a communication thread cuts each bucket into its chunks (ps/partition.h),
// pushes every chunk to the server that owns it, and receives that server's reply - the
// chunk's updated parameters - straight into the parameter buffer. wait_params(i) returns once
// every chunk of tensor i has its reply, so pushes overlap the rest of backward and pulls overlap
// the next forward. The learning rate of step t travels with its pushes.
// With overlap off (--overlap off, the plain variant for comparison) nothing is pushed until the
// last tensor of the step is ready, and wait_params waits for every chunk.
// The thread exists because Open MPI moves a large message only inside MPI calls: it keeps
// polling while the trainer computes. Contract with the trainer: after tensor_ready(i) the
// backend may overwrite tensor i's parameters at any time until wait_params(i) returns.
//
// Co-located mode: this process also runs a server shard on a thread (ServerLoop), reached
// through a LocalLink; its chunks never cross the Comm.
//
// Shared memory: a server on the same host (co-located or dedicated) is reached through shared
// segments (ps/shared_segment.h): a push copies the chunk once into this worker's segment and
// sends only its header; the reply is an empty message and the parameters are copied once out
// of the server's segment. Servers on other hosts, and every server when
// PsWorkerOptions::shared_memory is off, get the data in the messages.
//
// Faults: every reply has a deadline, the timeout plus a grace of timeout/2 within [0.5 s, 10 s]
// (so that a server's report naming a silent worker arrives first), counting only time the comm
// thread was running (common/watch_clock.h); on expiry, or when a server reports a failure, every
// call throws, and the servers are told (kAbort) so that the whole job stops with an error naming
// the rank that failed. Under bsp and ssp a server's heartbeat (it holds this worker's replies back
// for a slower, live worker) renews the deadlines of that server's replies. Liveness: the comm
// thread heartbeats the servers it sent nothing for timeout/4 while it waits (for a reply, or at
// a meeting) or while the trainer thread shows signs of life
// (common/thread_pulse.h), so a live worker in a step longer than --timeout is not named by the
// servers; a trainer asleep or blocked (`--fault hang`) stops them within about timeout/4, and a
// stopped or dead process sends none. A run whose steps push to every server within timeout/4
// (any normal bsp run with steps well under --timeout) sends no such heartbeat.
//
//   PsWorker ps(world, make_ps_group("2", world->size()), opts);
//   ps.start(layout, {params, grads}, opt_cfg);
//   ps.begin_step(1, lr); ...; ps.tensor_ready(i); ...; ps.wait_params(i); ...; ps.shutdown();
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/gradient_sync.h"
#include "common/trace.h"
#include "ps/ps_group.h"

namespace starring::ps {

struct PsWorkerOptions {
  Seconds timeout{60.0};
  double bucket_mb = 25.0;
  std::size_t chunk_bytes = 4 << 20;
  std::string partition = "range";
  std::string consistency = "bsp";
  int staleness = 2;
  bool overlap = true;
  std::string update = "optimizer";  // "sum": the push+pull bench (parameters = sum of pushes)
  std::string fault;                 // passed to the co-located server
  int untimed_steps = 0;             // passed to the co-located server (ServerOptions)
  bool shared_memory = true;         // data through shared segments where a server is on this host
  Trace* trace = nullptr;
};
PsWorkerOptions worker_options(const SyncConfig& sync, Trace* trace);

class PsWorker : public GradientSync {
 public:
  PsWorker(std::shared_ptr<Comm> comm, PsGroup group, PsWorkerOptions opt);
  ~PsWorker() override;

  void start(const ParamLayout& layout, SyncBuffers buffers, const OptimizerConfig& opt) override;
  void begin_step(std::int64_t step, float lr) override;
  void tensor_ready(std::size_t backward_index) override;
  void wait_params(std::size_t backward_index) override;
  void flush() override;
  SyncStepStats take_stats() override;
  void shutdown() override;
  // Before start() only (start() calls it for a plan the servers cannot serve): dedicated
  // servers are told why (kAbort). Co-located: no shard runs yet.
  void abandon(const std::string& why) override;
  std::string name() const override { return "ps"; }
  // Heartbeats to the servers (as while a reply is outstanding) while the trainer waits for a
  // slower worker at a meeting: the servers otherwise name this worker as silent.
  void waiting_for_workers(bool on) override;
  // The trainer sleeps until then as simulated work (--straggler): alive meanwhile.
  void working_until(std::chrono::steady_clock::time_point until) override;
  // bsp: 0; ssp: --staleness; asp: -1 (no bound)
  int max_step_skew() const override;
  // Checkpoints (worker_state.cc): worker 0 gathers every chunk's optimizer state from the
  // servers (kGetState) and restores it on resume (kSetState, acknowledged); no-ops elsewhere.
  void save_optimizer_state(std::vector<float>& s1, std::vector<float>& s2) override;
  void load_optimizer_state(const std::vector<float>& s1, const std::vector<float>& s2) override;
  // asp/ssp: this worker's parameters become the servers' master copy (kGetState, parameters
  // only); bsp: nothing to do, every reply is the round's result.
  void refresh_params() override;
  // The servers are asked for the parameters (as refresh_params, into a scratch buffer) within
  // the grace: a server that does not answer, or a failure already reported, is thrown.
  void check_peers() override;

  // Bytes and messages this worker has moved: the Comm's counters plus the data that went
  // through shared segments instead of messages (co-located: its shard's too, as the Comm's
  // counters include the shard's messages).
  CommCounters counters() const;
  // After shutdown(): every server's statistics from its goodbye message, by server index.
  nlohmann::json server_stats() const;
  // After shutdown(), co-located mode: this process's own shard's statistics (else {}).
  nlohmann::json local_server_stats() const;

 private:
  class Impl;  // ps/ps_worker_impl.h: the state, the comm thread, the co-located shard
  std::unique_ptr<Impl> impl_;
};

}  // namespace starring::ps
