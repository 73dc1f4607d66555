// PsWorker::Impl: what a PsWorker holds and does (see ps/ps_worker.h for the behaviour). Internal
// to ps/: PsWorker forwards every call here. Its code lives in
//   ps_worker.cc     the trainer's per-step calls, waits, statistics
//   worker_start.cc  start (plan, co-located shard, start messages) and shutdown
//   worker_comm.cc   the communication thread
//   worker_state.cc  checkpoints and parameter fetches (kGetState / kSetState)
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/comm.h"
#include "common/gradient_sync.h"
#include "common/thread_pulse.h"
#include "common/watch_clock.h"
#include "ps/local_link.h"
#include "ps/partition.h"
#include "ps/protocol.h"
#include "ps/ps_group.h"
#include "ps/ps_worker.h"
#include "ps/shared_segment.h"

namespace starring::ps {

struct StateFetch;  // worker_state.cc: one fetch_from_servers' outstanding answers

class PsWorker::Impl {
 public:
  Impl(std::shared_ptr<Comm> comm, PsGroup group, PsWorkerOptions opt);

  // PsWorker's calls, as documented there
  void start(const ParamLayout& layout, SyncBuffers buffers, const OptimizerConfig& opt);
  void begin_step(std::int64_t step, float lr);
  void tensor_ready(std::size_t backward_index);
  void wait_params(std::size_t backward_index);
  void flush();
  SyncStepStats take_stats();
  void shutdown();
  void abandon(const std::string& why);
  void waiting_for_workers(bool on) { at_meeting_.store(on, std::memory_order_relaxed); }
  void working_until(std::chrono::steady_clock::time_point until) { pulse_.working_until(until); }
  int max_step_skew() const {
    return opt_.consistency == "asp" ? -1 : opt_.consistency == "ssp" ? opt_.staleness : 0;
  }
  void save_optimizer_state(std::vector<float>& s1, std::vector<float>& s2);
  void load_optimizer_state(const std::vector<float>& s1, const std::vector<float>& s2);
  void refresh_params();
  void check_peers();
  CommCounters counters() const;
  nlohmann::json server_stats() const;
  nlohmann::json local_server_stats() const { return local_server_stats_; }

 private:
  struct Job {
    int bucket = 0;
    std::int64_t step = 0;
    float lr = 0;
  };
  struct Flight {  // comm-thread state of one chunk
    // the push's message; a send to a dead or stopped server may still read it when this worker
    // ends: then kept for the process (release_sends)
    std::unique_ptr<std::vector<char>> staging = std::make_unique<std::vector<char>>();
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
  void open_window(std::int64_t step);
  void push_chunk(int chunk, const Job& job);
  bool poll_flights();
  bool poll_ctl();
  void on_ctl(Op op, const std::string& text, bool timeout, int server);
  void on_reply(int chunk);
  void count_push(Flight& f);
  bool tracing() const { return opt_.trace && opt_.trace->enabled(); }
  void trace_window(const char* phase, std::chrono::steady_clock::time_point from,
                    std::chrono::steady_clock::time_point to, std::int64_t step) const;
  void open_server_segment(int server, const std::string& ack_text);
  void check_deadlines();
  // Heartbeats every server (`only_quiet`: those sent nothing for timeout/4).
  void heartbeat(bool only_quiet = false);
  void fail(std::exception_ptr e);
  void send_abort(const std::string& why, bool timeout);
  // The comm thread's end: its sends still in flight (to a dead or stopped server) keep their
  // buffers for the rest of the process (ps/protocol.h, release_unfinished), as PendingSends'.
  void release_sends();

  // worker_state.cc helpers
  void on_state(const PsHeader& h, const float* data);
  // `limit`: how long to wait for the answers (0: the timeout plus the grace).
  CommCounters fetch_from_servers(int parts, float* const dsts[3], Seconds limit = Seconds(0));
  void request_state(int parts, StateFetch& fetch);
  void await_state(int parts, StateFetch& fetch, Seconds limit);
  void unpack_state(const StateFetch& fetch, float* const dsts[3]) const;

  // worker_start.cc helpers
  void make_start_plan(const ParamLayout& layout);  // plan_, or ConfigError
  void start_local_server();
  void send_init(const ParamLayout& layout, PendingSends& sends);
  PsInitSpec init_spec(const ParamLayout& layout, int server) const;
  void say_goodbye();  // kDone to every server, then their goodbyes (kBye)
  // Waits, within --timeout + grace, until every server s has sent owed[s] acknowledgements more
  // than before[s] (acks_ then); a timeout names the servers short of theirs ("; no <missing>
  // from server rank 2 (...)"). Co-located, an error of this rank's own shard ends it, thrown.
  void wait_acks(const std::vector<int>& before, const std::vector<int>& owed, const char* what,
                 const char* missing);
  // "server rank 2, server rank 3": the servers whose `seen` flag is 0 (under mu_)
  std::string servers_without(const std::vector<char>& seen) const;

  // ps_worker.cc helpers
  // `limit`: the safety net's wait (zero: 2 x --timeout + 2 x grace). `silent` (called under
  // mu_): what a timeout of this wait adds, e.g. "; no goodbye from server rank 2 (...)".
  void wait_for(const std::function<bool()>& ready, const char* what, bool count_wait,
                Seconds limit = Seconds(0), const std::function<std::string()>& silent = {});
  void wait_chunks(const std::vector<int>& chunks, const char* what);
  void rethrow_if_failed();
  int server_rank(int chunk) const;
  bool local_chunk(int chunk) const;
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
  std::vector<int> active_;      // chunks with a request in flight
  ReceiveVector<char> ctl_buf_;  // kept where a receive let go may still write (kept_memory.h)
  std::unique_ptr<Request> ctl_req_;
  WatchClock watch_;  // this thread's pauses between deadline checks (common/watch_clock.h)
  std::chrono::steady_clock::time_point last_heartbeat_;
  std::vector<std::chrono::steady_clock::time_point> last_sent_;  // by server index
  // The trainer thread's signs of life (common/thread_pulse.h): while it shows any,
  // this thread heartbeats the servers it sends nothing else to (a step, an evaluation longer
  // than --timeout). Bound in start() (the trainer thread), marked at each call of the trainer.
  ThreadPulse pulse_;
  std::atomic<bool> at_meeting_{false};  // the trainer waits for a slower worker (any thread)
  // A heartbeat's message (never changes: sends of it may overlap), and its sends in flight
  std::unique_ptr<std::vector<char>> heartbeat_msg_;
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
  std::uint64_t hb_sent_ = 0,
                hb_recv_ = 0;  // hb_recv_: the servers' (bsp/ssp, see server_alive_at_)
  // The goodbye began (say_goodbye; set under hb_mu_, under which heartbeat() reads it before
  // each send over the Comm): no heartbeat follows a kDone (ServerLoop::finish).
  std::atomic<bool> goodbye_{false};
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
