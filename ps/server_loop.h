// ServerLoop: one parameter-server shard's event loop over a Comm (a dedicated server rank's
// serve(), or the server thread of a co-located worker).
//
// It keeps a few receives posted from any worker on the request tag and handles messages in
// arrival order; pushes go to a ShardServer, whose due replies are sent back without blocking
// (and, in co-located mode, to this process's own worker through the LocalLink).
// Start: every worker sends kInit (all must agree), worker 0 the initial parameters; once all
// have arrived the server sends kAck to every worker. Clean shutdown: after kDone from every
// worker the server sends each a kBye carrying its statistics and returns them.
// Shared memory (ps/shared_segment.h): the parameters live in a segment that workers on this
// host map; a worker whose segment this server maps pushes headers only (the data is read from
// its segment) and gets empty replies for stable (bsp) values, which it copies out of ours.
// Faults: a worker that has nothing pending at this server and sends nothing for the timeout,
// or does not take a reply within it, is named in a TimeoutError (time the server itself was not
// running is not counted: server_liveness.cc); a kAbort from a worker stops the server too. Any
// message counts as a sign of life, its heartbeats included (a worker alive in a long step sends
// them, ps/ps_worker.h); under bsp and ssp this server heartbeats a worker whose replies it holds
// back for timeout/4 (heartbeat_held), so that the worker does not name it meanwhile.
// Before throwing, the server sends kAbort with the reason to every worker, so every rank ends
// with an error that names the rank that died or went silent. It gives its sends a moment (at
// most a second) to complete; the buffers of those that did not (a worker dead or stopped), and
// the parameters a stable reply is sent from, are kept until the process ends, not freed with
// the server while MPI may still read them (as a worker keeps its own, ps/protocol.h).
#pragma once
#include <boost/container/vector.hpp>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/comm.h"
#include "common/kept_memory.h"
#include "common/trace.h"
#include "common/watch_clock.h"
#include "ps/local_link.h"
#include "ps/ps_group.h"
#include "ps/shard_server.h"
#include "ps/shared_segment.h"

namespace starring::ps {

struct ServerOptions {
  Seconds timeout{60.0};
  std::size_t chunk_bytes = 4 << 20;  // sizes the receive buffers (must match the workers')
  int recv_slots = 4;                 // receives kept posted
  std::string fault;                  // "hang:RANK:STEP" / "kill:RANK:STEP" (RANK: comm rank)
  bool shared_memory = true;          // data through shared segments with workers on this host
  // A bsp push that arrives in a message before its turn keeps its receive buffer (no copy)
  // only when it fills at least this fraction of it; smaller ones are copied, so that small
  // chunks do not pin whole receive buffers (at least 1 MiB each) while they wait.
  double hold_min_fill = 0.5;
  // The workers' --untimed-steps: the busy time of the first this many steps is kept per step
  // (run()'s busy_untimed_s), so that a summary can leave out the steps the workers' times do.
  int untimed_steps = 0;
  Trace* trace = nullptr;
};

class ServerLoop {
 public:
  // `comm`: every rank of the job (workers and servers, as numbered in `group`). `local`: in
  // co-located mode, the link to this process's own worker (not owned; it outlives the loop).
  ServerLoop(std::shared_ptr<Comm> comm, PsGroup group, ServerOptions opt,
             LocalLink* local = nullptr);
  ~ServerLoop();

  // Serves until every worker has said done; returns this server's statistics (JSON object:
  // rank, server, bytes_in, bytes_out, push_bytes_in, reply_bytes_out, busy_s, wall_s, pushes,
  // updates, rounds, staleness_hist, ...; busy_s is the whole run's), and busy_untimed_s: the
  // busy seconds through each of the first ServerOptions::untimed_steps steps, cumulative (entry k:
  // the pushes of the first k + 1 steps this server saw). Throws TimeoutError / Error after
  // telling the workers.
  nlohmann::json run();

 private:
  // A receive buffer holds the largest message a worker may send (--ps-chunk-bytes, at least
  // 1 MiB), which can be far more than the model: left uninitialized, only the bytes that arrive
  // are touched (zero-filled, --ps-chunk-bytes 1G cost 4 GiB of memory per server on any model).
  // Kept rather than freed where a receive let go unfinished may still write (a worker stopped
  // mid-message: common/kept_memory.h).
  using RecvBuffer = boost::container::vector<char, ReceiveAllocator<char>>;
  struct Slot {
    RecvBuffer buf;
    std::unique_ptr<Request> req;
  };
  struct PendingSend {
    std::unique_ptr<Request> req;
    std::shared_ptr<const void> keep;  // owns the bytes until the send completes
    bool reads_params = false;         // sends from the parameters themselves (a stable reply)
    int worker = 0;
    std::string what;
    std::chrono::steady_clock::time_point since;
  };

  void loop();
  void book_control(const char* buf, std::size_t bytes);
  void handle(const char* buf, std::size_t bytes, int source_rank);
  void handle_local(const LocalMsg& m);
  const float* shared_push(const PsHeader& h, int worker);
  // `kept`: data stays valid until the reply (a worker's segment or, co-located, its buffer).
  void on_message(const PsHeader& h, const float* data, const std::string& text, int worker,
                  bool kept = false);
  void on_init(int worker, const std::string& text);
  void on_push(const PsHeader& h, const float* data, int worker, bool kept);
  // server_state.cc: kGetState (worker 0 for a checkpoint; any worker, parameters only, before
  // an evaluation under asp/ssp) and kSetState (worker 0, on resume)
  void on_get_state(const PsHeader& h, int worker);
  void on_set_state(const PsHeader& h, const float* data, int worker);
  void maybe_ack();
  void send_replies(std::vector<PsReply>& replies);
  void send_ctl(int worker, Op op, const std::string& text, bool timeout);
  bool complete_sends();
  void check_liveness();  // server_liveness.cc
  void heartbeat_held();  // server_liveness.cc
  std::string progress(std::chrono::steady_clock::time_point now) const;
  void maybe_fault(std::int64_t step);
  void abort_all(const std::string& why, bool timeout);
  // Releases the sends; an unfinished one keeps its buffer (and the parameters, if it reads
  // them) until the process ends (ps/protocol.h, release_unfinished).
  void release_sends() noexcept;
  void finish();
  nlohmann::json stats() const;
  std::string who(int worker) const;  // "worker rank 3"
  bool is_local(int worker) const { return local_ && group_.worker_ranks[worker] == rank_; }

  std::shared_ptr<Comm> comm_;
  PsGroup group_;
  ServerOptions opt_;
  LocalLink* local_;
  int rank_, index_, workers_;
  std::string where_;
  std::vector<Slot> slots_;
  std::size_t head_ = 0;
  std::vector<PendingSend> sends_;
  std::unique_ptr<ShardServer> core_;
  std::string init_text_;
  int inits_ = 0, done_count_ = 0;
  bool acked_ = false, finished_ = false;
  std::vector<char> done_;
  std::vector<std::chrono::steady_clock::time_point> last_heard_;
  // by worker: when this server last sent it a reply or a heartbeat (heartbeat_held), or took
  // a push from it while it was owed nothing
  std::vector<std::chrono::steady_clock::time_point> last_told_;
  std::chrono::steady_clock::time_point started_;
  WatchClock watch_;  // the loop's pauses between liveness checks (see server_liveness.cc)
  std::vector<PsReply> replies_;  // scratch
  // bsp pushes that arrived in a message before their turn keep their receive buffer (the slot
  // gets a spare one) until their chunk's round is replied to: no copy.
  bool take_slot_buffer_ = false;                               // set by handle()
  std::unordered_map<int, std::vector<RecvBuffer>> held_bufs_;  // chunk -> buffers
  std::vector<RecvBuffer> spare_bufs_;
  // shared memory: our parameters; per worker, its push segment (null: data in the messages),
  // and whether it pushes through it (then stable replies are empty messages)
  std::unique_ptr<SharedSegment> params_seg_;
  std::vector<std::unique_ptr<SharedSegment>> worker_seg_;
  std::vector<char> shm_worker_;
  std::unordered_map<int, std::size_t> chunk_begin_;
  // statistics
  double busy_s_ = 0, wall_s_ = 0;
  std::int64_t first_step_ = -1;      // the first push's step
  std::vector<double> busy_by_step_;  // the first untimed_steps steps' busy seconds, per step
  std::uint64_t bytes_in_ = 0, bytes_out_ = 0, push_bytes_in_ = 0, reply_bytes_out_ = 0;
  // Parts of bytes_in_ / bytes_out_ that are no step's traffic: start, initial parameters and
  // checkpoints in (every message but kPush: kInit, kInitParams, kSetState, kGetState, kDone,
  // kHeartbeat, kAbort); acks, bye, abort, kState out.
  std::uint64_t setup_bytes_in_ = 0;
  std::uint64_t ctl_bytes_out_ = 0;
  std::uint64_t local_push_bytes_ = 0, msgs_in_ = 0, msgs_out_ = 0;
  std::uint64_t heartbeats_in_ = 0, heartbeats_out_ = 0;  // from workers; heartbeat_held's
  std::uint64_t shm_push_bytes_ = 0, shm_reply_bytes_ = 0;
  std::int64_t fault_rank_ = -1, fault_step_ = -1;
  std::string fault_kind_;
};

}  // namespace starring::ps
