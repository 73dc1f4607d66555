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
// for a slower, live worker) renews the deadlines of that server's replies. Liveness: besides
// the heartbeats while it waits (for a reply, or at a meeting), the comm thread heartbeats the
// servers it sent nothing for timeout/4 while the trainer thread shows signs of life
// (common/thread_pulse.h), so a live worker in a step longer than --timeout is not named by the
// servers; a trainer asleep or blocked (`--fault hang`) stops them within about timeout/4, and a
// stopped or dead process sends none. A run whose steps push to every server within timeout/4
// (any normal bsp run with steps well under --timeout) sends no such heartbeat.
//
//   PsWorker ps(world, make_ps_group("2", world->size()), opts);
//   ps.start(layout, {params, grads}, opt_cfg);
//   ps.begin_step(1, lr); ...; ps.tensor_ready(i); ...; ps.wait_params(i); ...; ps.shutdown();
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/comm.h"
#include "common/gradient_sync.h"
#include "common/thread_pulse.h"
#include "common/trace.h"
#include "common/watch_clock.h"
#include "ps/local_link.h"
#include "ps/partition.h"
#include "ps/ps_group.h"
#include "ps/server_loop.h"
#include "ps/shared_segment.h"

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
  void waiting_for_workers(bool on) override { at_meeting_.store(on, std::memory_order_relaxed); }
  // The trainer sleeps until then as simulated work (--straggler): alive meanwhile.
  void working_until(std::chrono::steady_clock::time_point until) override {
    pulse_.working_until(until);
  }
  int max_step_skew() const override {
    return opt_.consistency == "asp" ? -1 : opt_.consistency == "ssp" ? opt_.staleness : 0;
  }
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
  nlohmann::json local_server_stats() const { return local_server_stats_; }

 private:
  struct Job {
    int bucket = 0;
    std::int64_t step = 0;
    float lr = 0;
  };
  struct Flight {  // comm-thread state of one chunk
    std::vector<char> staging;
    std::unique_ptr<Request> send, recv;
    std::chrono::steady_clock::time_point since;
    double trace_t0 = 0;
    std::int64_t step = 0;
    std::int64_t issued = 0;  // pushes issued (read under mu_ against completed_)
    bool pushed = false;      // this push counted in its step's window (count_push)
  };

  // worker_comm.cc: the communication thread
  void comm_main();
  void comm_loop();
  bool issue(const Job& job);
  bool poll_flights();
  bool poll_ctl();
  void on_ctl(Op op, const std::string& text, bool timeout, int server);
  void on_reply(int chunk);
  void count_push(Flight& f);
  void open_server_segment(int server, const std::string& ack_text);
  void check_deadlines();
  // Heartbeats every server (`only_quiet`: those sent nothing for timeout/4).
  void heartbeat(bool only_quiet = false);
  void fail(std::exception_ptr e);
  void send_abort(const std::string& why, bool timeout);

  // worker_state.cc helpers
  void on_state(const PsHeader& h, const float* data);
  // `limit`: how long to wait for the answers (0: the timeout plus the grace).
  CommCounters fetch_from_servers(int parts, float* const dsts[3], Seconds limit = Seconds(0));

  // ps_worker.cc helpers
  void make_start_plan(const ParamLayout& layout);  // plan_, or ConfigError
  void send_init(const ParamLayout& layout);
  // `limit`: the safety net's wait (zero: 2 x --timeout + 2 x grace). `silent` (called under
  // mu_): what a timeout of this wait adds, e.g. "; no goodbye from server rank 2 (...)".
  void wait_for(const std::function<bool()>& ready, const char* what, bool count_wait,
                Seconds limit = Seconds(0), const std::function<std::string()>& silent = {});
  // Waits, within --timeout + grace, until every server s has sent owed[s] acknowledgements more
  // than before[s] (acks_ then); a timeout names the servers short of theirs ("; no <missing>
  // from server rank 2 (...)"). Co-located, an error of this rank's own shard ends it, thrown.
  void wait_acks(const std::vector<int>& before, const std::vector<int>& owed, const char* what,
                 const char* missing);
  // "server rank 2, server rank 3": the servers whose `seen` flag is 0 (under mu_)
  std::string servers_without(const std::vector<char>& seen) const;
  void wait_chunks(const std::vector<int>& chunks, const char* what);
  void rethrow_if_failed();
  int server_rank(int chunk) const;
  bool local_chunk(int chunk) const;
  void start_local_server();
  Seconds grace() const;

  std::shared_ptr<Comm> comm_;
  PsGroup group_;
  PsWorkerOptions opt_;
  int rank_ = 0, index_ = 0;
  std::string where_;
  PsPlan plan_;
  SyncBuffers buf_;
  OptimizerConfig opt_cfg_;
  bool started_ = false, shut_ = false;
  std::int64_t step_ = 0;
  float lr_ = 0;
  std::vector<char> ready_;        // per tensor, this step
  std::vector<int> bucket_ready_;  // tensors ready per bucket
  std::vector<int> held_;          // overlap off: complete buckets not pushed yet
  std::vector<int> all_chunks_;

  // shared with the comm thread (and the co-located server thread), under mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::int64_t> requested_, completed_;
  int byes_ = 0;
  float* state_dst_[3] = {nullptr, nullptr, nullptr};  // save_optimizer_state: params, s1, s2
  std::size_t state_got_ = 0;                          // state vectors received locally
  std::vector<std::string> bye_text_;
  std::vector<char> bye_seen_;  // by server index: its goodbye came (to name those that did not)
  // by server index: the acknowledgements it sent (its start's, then one per kSetState)
  std::vector<int> acks_;
  // by server index: its last heartbeat (bsp/ssp: it holds a reply of ours back for a slower live
  // worker), which the reply deadlines count from; and the latest of any server
  std::vector<std::chrono::steady_clock::time_point> server_alive_at_;
  std::chrono::steady_clock::time_point server_alive_last_{};
  double wait_s_ = 0, push_s_ = 0, pull_s_ = 0, comm_s_ = 0, stage_s_ = 0;
  std::uint64_t steps_done_ = 0;
  CommCounters last_counters_;

  // comm thread only
  std::vector<Flight> flights_;
  std::vector<int> active_;  // chunks with a request in flight
  std::vector<char> ctl_buf_, abort_msg_;
  std::unique_ptr<Request> ctl_req_;
  WatchClock watch_;  // this thread's pauses between deadline checks (common/watch_clock.h)
  std::chrono::steady_clock::time_point last_heartbeat_;
  std::vector<std::chrono::steady_clock::time_point> last_sent_;  // by server index
  // The trainer thread's signs of life (common/thread_pulse.h): while it shows any,
  // this thread heartbeats the servers it sends nothing else to (a step, an evaluation longer
  // than --timeout). Bound in start() (the trainer thread), marked at each call of the trainer.
  ThreadPulse pulse_;
  std::atomic<bool> at_meeting_{false};  // the trainer waits for a slower worker (any thread)
  PsHeader heartbeat_msg_;
  std::vector<std::unique_ptr<Request>> heartbeats_;
  // shared memory: this worker's push segment; per server index, its parameter segment (null:
  // data travels in the messages)
  std::unique_ptr<SharedSegment> push_seg_;
  std::vector<std::unique_ptr<SharedSegment>> server_seg_;
  std::atomic<std::uint64_t> shm_sent_{0}, shm_recv_{0};  // bytes through the segments
  // Heartbeats this worker sent through the Comm: control, not step traffic (counters() takes
  // them out). hb_mu_ holds a heartbeat's send and its booking here together, and counters()'
  // read of both, so a step's figures never hold one without the other.
  mutable std::mutex hb_mu_;
  std::uint64_t hb_sent_ = 0, hb_recv_ = 0;                     // hb_recv_: the servers' (bsp/ssp)
  std::chrono::steady_clock::time_point win_start_, win_sent_;  // the current step's window
  std::size_t win_sends_ = 0, win_replies_ = 0;
  std::int64_t win_step_ = -1;
  std::thread comm_thread_;

  // co-located server
  std::unique_ptr<LocalLink> link_;
  std::thread server_thread_;
  std::exception_ptr server_error_;
  nlohmann::json local_server_stats_ = nlohmann::json::object();
};

}  // namespace starring::ps
