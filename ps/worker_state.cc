// The worker side of checkpoints (see ps/protocol.h, kGetState / kSetState / kState). Only worker
// 0 talks to the servers; the trainer calls these on every worker after flush() and a barrier
// (save) or after start() and before a barrier (load), so no push is in flight under any
// consistency model. Before an evaluation under asp/ssp every worker fetches the parameters
// alone the same way (refresh_params). Requests go out on the request tag (or the LocalLink to this
// process's own shard); the state vectors of one server come back on kStateTag in request order,
// which is the order the receives are posted in (MPI's non-overtaking rule matches them one to
// one). Part 0 of a chunk's answer is the server's master copy of its parameters, written into this
// worker's parameter buffer: the checkpoint then holds parameters and state of the same moment
// under asp/ssp too (under bsp the values are the ones this worker already has, bit for bit).
#include <algorithm>
#include <cstring>

#include "common/clock.h"
#include "common/error.h"
#include "ps/backoff.h"
#include "ps/ps_worker_impl.h"

namespace starring::ps {

void PsWorker::Impl::on_state(const PsHeader& h, const float* data) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    const ChunkSpec& ch = plan_.chunks.at(static_cast<std::size_t>(h.chunk));
    float* dst = h.step >= 0 && h.step <= 2 ? state_dst_[h.step] : nullptr;
    if (dst && h.count == ch.count) std::memcpy(dst + ch.begin, data, h.count * sizeof(float));
    ++state_got_;
  }
  cv_.notify_all();
}

void PsWorker::Impl::save_optimizer_state(std::vector<float>& s1, std::vector<float>& s2) {
  STARRING_CHECK(started_ && !shut_, where_, ": save_optimizer_state outside start()..shutdown()");
  flush();
  if (index_ != 0) return;
  STARRING_CHECK(opt_.update == "optimizer", where_, ": no optimizer state under update '",
                 opt_.update, "'");
  const int parts = opt_cfg_.type == "adamw" ? 2 : 1;  // + part 0, the parameters
  s1.assign(plan_.total, 0.0f);
  s2.assign(parts == 2 ? plan_.total : 0, 0.0f);
  float* dsts[3] = {buf_.params, s1.data(), s2.data()};
  fetch_from_servers(parts, dsts);
}

// Under bsp every worker holds the servers' values already (each reply is the round's result);
// under asp/ssp a worker's last reply lags the pushes applied after it, so an evaluation asks
// for the master copy (the trainer calls this after a flush and a barrier on every worker).
void PsWorker::Impl::refresh_params() {
  STARRING_CHECK(started_ && !shut_, where_, ": refresh_params outside start()..shutdown()");
  flush();
  if (opt_.consistency == "bsp") return;
  float* dsts[3] = {buf_.params, nullptr, nullptr};
  // The evaluation's traffic, not a step's: left out of the next take_stats() (its own messages
  // only: the other workers may already be pushing their next step).
  const CommCounters fetched = fetch_from_servers(0, dsts);
  last_counters_.bytes_sent += fetched.bytes_sent;
  last_counters_.bytes_recv += fetched.bytes_recv;
}

// A barrier of the trainer's timed out: under asp a worker that waits there for a worker that
// waits for a stopped server timed out first (the barrier's wait began earlier and is shorter than
// a reply's deadline), and named that worker. A server that does not answer now is named instead.
void PsWorker::Impl::check_peers() {
  if (!started_ || shut_) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    rethrow_if_failed();  // a server's report (kAbort) or an overdue reply
  }
  std::vector<float> scratch(plan_.total);
  float* dsts[3] = {scratch.data(), nullptr, nullptr};
  fetch_from_servers(0, dsts, grace());
}

// One fetch_from_servers' answers: the state vectors that come over the Comm, each into its own
// buffer (header + data) on kStateTag, and how many this process's own shard writes directly.
struct StateFetch {
  struct Remote {
    int chunk, part;
    ReceiveVector<char> buf;  // kept where a receive let go may still write (kept_memory.h)
    std::unique_ptr<Request> req;
  };
  explicit StateFetch(Comm& comm) : sends(comm) {}
  std::vector<Remote> remote;  // in the order posted (one server's answers come in that order)
  // Requests not sent when this throws keep their buffers: a server that goes on may still match
  // them (ps/protocol.h, PendingSends).
  PendingSends sends;
  std::size_t local_parts = 0;  // vectors the own shard writes (on_state counts them)
  int first_local = -1;         // named when every remote answer is in and the own shard's is not
  CommCounters moved;           // the bytes of the messages exchanged over the Comm
};

// Asks every chunk's server for its parameters and `parts` optimizer-state vectors (kGetState)
// and writes vector p of each chunk at its offset in dsts[p]. Returns the bytes of the messages
// it exchanged over the Comm.
CommCounters PsWorker::Impl::fetch_from_servers(int parts, float* const dsts[3], Seconds limit) {
  StateFetch fetch(*comm_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::copy(dsts, dsts + 3, state_dst_);
    state_got_ = 0;
  }
  // However this ends (all answers in, a timeout, a server's failure), this process's shard must
  // write nothing into dsts afterwards: an answer it sends after a timeout lands nowhere (a
  // check_peers' dsts are its own scratch buffer, freed when the timeout is thrown).
  struct Forget {
    Impl* w;
    ~Forget() {
      std::lock_guard<std::mutex> lk(w->mu_);
      std::fill(w->state_dst_, w->state_dst_ + 3, nullptr);
    }
  } forget{this};
  if (link_) link_->on_state = [this](const PsHeader& h, const float* d) { on_state(h, d); };
  request_state(parts, fetch);
  await_state(parts, fetch, limit > Seconds(0) ? limit : opt_.timeout + grace());
  fetch.sends.wait(opt_.timeout);  // matched already (the answers came): completes at once
  unpack_state(fetch, dsts);
  return fetch.moved;
}

// One kGetState per chunk; the receives of a remote chunk's answers are posted before it is sent.
void PsWorker::Impl::request_state(int parts, StateFetch& fetch) {
  fetch.remote.reserve(plan_.chunks.size() * static_cast<std::size_t>(parts + 1));
  for (std::size_t c = 0; c < plan_.chunks.size(); ++c) {
    const int ci = static_cast<int>(c);
    PsHeader h;
    h.op = Op::kGetState;
    h.worker = index_;
    h.chunk = ci;
    h.step = parts;
    if (local_chunk(ci)) {
      if (fetch.first_local < 0) fetch.first_local = ci;
      fetch.local_parts += static_cast<std::size_t>(parts + 1);
      link_->post({h, nullptr, {}});
      continue;
    }
    for (int p = 0; p <= parts; ++p) {
      StateFetch::Remote& r = fetch.remote.emplace_back(StateFetch::Remote{ci, p, {}, nullptr});
      r.buf.resize(sizeof(PsHeader) + plan_.chunks[c].count * sizeof(float));
      r.req = comm_->irecv(r.buf.data(), r.buf.size(), server_rank(ci), kStateTag);
      fetch.moved.bytes_recv += r.buf.size();
    }
    fetch.sends.send(make_message(h, nullptr, 0), server_rank(ci), kReqTag);
    fetch.moved.bytes_sent += sizeof h;
  }
}

// Polls until every vector has landed, within `limit`; the comm thread keeps reporting server
// failures. A timeout names the first chunk still missing and its server.
void PsWorker::Impl::await_state(int parts, StateFetch& fetch, Seconds limit) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(limit);
  Backoff backoff;
  const auto& remote = fetch.remote;
  for (std::size_t next = 0;;) {
    // Read before the poll: a thread that stood still past the deadline right after a poll looks
    // again before it names a server whose answer may have arrived meanwhile
    // (common/watch_clock.h).
    const bool late = Clock::now() > deadline;
    while (next < remote.size() && remote[next].req->test()) ++next;
    {
      std::lock_guard<std::mutex> lk(mu_);
      rethrow_if_failed();
      if (next == remote.size() && state_got_ == fetch.local_parts) return;
    }
    if (late) {
      const int c = next < remote.size() ? remote[next].chunk : fetch.first_local;
      throw TimeoutError(
          detail::concat(where_, ": timeout after ", limit.count(), " s waiting for ",
                         parts > 0 ? "the optimizer state" : "the parameters", " of chunk ", c,
                         " from server rank ", c >= 0 ? server_rank(c) : rank_));
    }
    backoff.idle();
  }
}

// Checks each remote answer's header and copies its vector to its offset in dsts[part] (the own
// shard's answers were written as they came, by on_state).
void PsWorker::Impl::unpack_state(const StateFetch& fetch, float* const dsts[3]) const {
  for (const auto& r : fetch.remote) {
    const RecvStatus st = r.req->status();
    const PsHeader& h = header_of(r.buf.data(), st.bytes, where_);
    const ChunkSpec& ch = plan_.chunks[static_cast<std::size_t>(r.chunk)];
    STARRING_CHECK(h.op == Op::kState && h.chunk == r.chunk && h.step == r.part &&
                       h.count == ch.count && st.bytes == r.buf.size(),
                   where_, ": bad optimizer-state message from server rank ", server_rank(r.chunk),
                   " (", op_name(h.op), " of chunk ", h.chunk, " part ", h.step,
                   ", expected chunk ", r.chunk, " part ", r.part, ")");
    std::memcpy(dsts[r.part] + ch.begin, r.buf.data() + sizeof(PsHeader), ch.count * sizeof(float));
  }
}

void PsWorker::Impl::load_optimizer_state(const std::vector<float>& s1,
                                          const std::vector<float>& s2) {
  STARRING_CHECK(started_ && !shut_, where_, ": load_optimizer_state outside start()..shutdown()");
  if (index_ != 0) return;
  const int parts = opt_cfg_.type == "adamw" ? 2 : 1;
  STARRING_CHECK(s1.size() == plan_.total && s2.size() == (parts == 2 ? plan_.total : 0), where_,
                 ": optimizer state of ", s1.size(), " + ", s2.size(), " floats for a model of ",
                 plan_.total, " parameters (", opt_cfg_.type, ")");
  std::vector<int> acks_before;
  {
    std::lock_guard<std::mutex> lk(mu_);
    acks_before = acks_;
  }
  std::vector<int> owed(acks_before.size(), 0);  // by server index: one kAck per kSetState
  PendingSends sends(*comm_);
  for (std::size_t c = 0; c < plan_.chunks.size(); ++c) {
    const ChunkSpec& ch = plan_.chunks[c];
    const int ci = static_cast<int>(c);
    for (int p = 1; p <= parts; ++p) {
      ++owed[static_cast<std::size_t>(ch.server)];
      PsHeader h;
      h.op = Op::kSetState;
      h.worker = index_;
      h.chunk = ci;
      h.step = p;
      h.count = static_cast<std::uint32_t>(ch.count);
      const float* data = (p == 1 ? s1 : s2).data() + ch.begin;
      if (local_chunk(ci)) {
        link_->post({h, data, {}});  // read by the server thread before it acknowledges
        continue;
      }
      sends.send(make_message(h, data, ch.count * sizeof(float)), server_rank(ci), kReqTag);
    }
  }
  // --timeout + grace, as for the start's acknowledgements (it was 2 x (--timeout + grace)): the
  // servers have started (they acknowledged it) and acknowledge each state vector as it lands, so
  // only a server stopped, stuck or much slower misses this; it is named. A server acknowledges a
  // message it received, so the sends are complete by then.
  wait_acks(acks_before, owed, "the servers to restore the optimizer state",
            "acknowledgement of the optimizer state");
  sends.wait(opt_.timeout);
}

}  // namespace starring::ps
