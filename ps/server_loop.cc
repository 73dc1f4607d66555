#include "ps/server_loop.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "ps/backoff.h"

namespace starring::ps {

ServerLoop::ServerLoop(std::shared_ptr<Comm> comm, PsGroup group, ServerOptions opt,
                       LocalLink* local)
    : comm_(std::move(comm)), group_(std::move(group)), opt_(std::move(opt)), local_(local) {
  rank_ = comm_->rank();
  index_ = group_.server_index(rank_);
  workers_ = group_.num_workers();
  STARRING_CHECK(index_ >= 0, "rank ", rank_, " is not a parameter server");
  where_ = "server rank " + std::to_string(rank_);
  done_.assign(static_cast<std::size_t>(workers_), 0);
  worker_seg_.resize(static_cast<std::size_t>(workers_));
  shm_worker_.assign(static_cast<std::size_t>(workers_), 0);
  // stop:RANK:STEP is a worker's (a stop request); servers act on kill and hang.
  if (const FaultSpec f = parse_fault(opt_.fault); f.kind == "kill" || f.kind == "hang") {
    fault_kind_ = f.kind;
    fault_rank_ = f.rank;
    fault_step_ = f.step;
  }
}

ServerLoop::~ServerLoop() { release_sends(); }

std::string ServerLoop::who(int worker) const {
  return "worker rank " + std::to_string(group_.worker_ranks.at(static_cast<std::size_t>(worker)));
}

nlohmann::json ServerLoop::run() {
  started_ = Clock::now();
  watch_ = WatchClock(opt_.timeout, started_);
  last_heard_.assign(static_cast<std::size_t>(workers_), started_);
  last_told_.assign(static_cast<std::size_t>(workers_), started_);
  const std::size_t cap = max_request_bytes(opt_.chunk_bytes);
  slots_.resize(static_cast<std::size_t>(std::max(2, opt_.recv_slots)));
  for (auto& s : slots_) {
    s.buf.resize(cap, boost::container::default_init);
    s.req = comm_->irecv(s.buf.data(), cap, kAnySource, kReqTag);
  }
  if (opt_.trace) opt_.trace->set_thread_name("server");
  try {
    loop();
  } catch (const std::exception& e) {
    const bool timeout = dynamic_cast<const TimeoutError*>(&e) != nullptr;
    abort_all(e.what(), timeout);
    for (auto& s : slots_) s.req.reset();  // cancels the posted receives
    throw;
  }
  for (auto& s : slots_) s.req.reset();
  wall_s_ = seconds_since(started_);
  nlohmann::json out = stats();
  std::vector<double> through(busy_by_step_.size());
  double sum = 0;
  for (std::size_t k = 0; k < through.size(); ++k) through[k] = sum += busy_by_step_[k];
  out["busy_untimed_s"] = through;
  return out;
}

void ServerLoop::loop() {
  Backoff backoff;
  while (!finished_) {
    bool progress = false;
    Slot& s = slots_[head_];
    bool received = false;
    // count_mu only around a receive that is there (see LocalLink::count_mu): held around every
    // poll, a co-located worker's per-step counters() waited for it whenever this thread lost
    // its core inside the lock (np 3 on 2 cores: 0.15-1.2 ms a step counted as neither compute
    // nor wait).
    if (!local_ || s.req->may_be_done()) {
      const auto counting = LocalLink::counting(local_);
      received = s.req->test();
      if (received) book_control(s.buf.data(), s.req->status().bytes);
    }
    if (received) {
      RecvStatus st = s.req->status();
      take_slot_buffer_ = false;
      handle(s.buf.data(), st.bytes, st.source);
      if (take_slot_buffer_) {  // an early push holds on to this buffer: post a spare one
        const int chunk = header_of(s.buf.data(), st.bytes, where_).chunk;
        RecvBuffer spare;  // from the pool; a new one only when it is empty
        if (!spare_bufs_.empty()) {
          spare = std::move(spare_bufs_.back());
          spare_bufs_.pop_back();
        } else {
          spare.resize(s.buf.size(), boost::container::default_init);
        }
        held_bufs_[chunk].push_back(std::exchange(s.buf, std::move(spare)));
      }
      s.req = comm_->irecv(s.buf.data(), s.buf.size(), kAnySource, kReqTag);
      head_ = (head_ + 1) % slots_.size();
      progress = true;
    }
    LocalMsg m;
    if (local_ && !finished_ && local_->poll(m)) {
      handle_local(m);
      progress = true;
    }
    progress |= complete_sends();
    if (watch_.due(Clock::now())) {
      check_liveness();
      heartbeat_held();
    }
    if (progress)
      backoff.reset();
    else
      backoff.idle();
  }
  finish();
}

// Set-up, checkpoints and control (kDone, heartbeats) are not steps (see the stats below): a
// co-located worker whose shard counted another worker's kDone or heartbeat as step traffic
// reported 32 bytes more or less depending on whether it arrived before a step's figures. Called
// under LocalLink::count_mu, right after the Comm counted the message.
void ServerLoop::book_control(const char* buf, std::size_t bytes) {
  if (!local_ || bytes < sizeof(PsHeader)) return;  // a short message is handle()'s error
  PsHeader h;
  std::memcpy(&h, buf, sizeof h);
  if (h.op != Op::kPush) local_->setup_recv.fetch_add(bytes, std::memory_order_release);
}

void ServerLoop::handle(const char* buf, std::size_t bytes, int source_rank) {
  const PsHeader& h = header_of(buf, bytes, where_);
  const int w = group_.worker_index(source_rank);
  STARRING_CHECK(w >= 0 && w == h.worker, where_, ": ", op_name(h.op), " message from rank ",
                 source_rank, ", which is not worker ", h.worker);
  bytes_in_ += bytes;
  ++msgs_in_;
  if (h.op != Op::kPush) setup_bytes_in_ += bytes;  // booked for the worker by book_control
  const bool floats = h.op == Op::kPush || h.op == Op::kInitParams || h.op == Op::kSetState;
  const std::size_t payload = bytes - sizeof(PsHeader);
  if (h.op == Op::kPush && payload == 0 && h.count > 0) {
    on_message(h, shared_push(h, w), std::string(), w, true);
    return;
  }
  STARRING_CHECK(!floats || payload == std::size_t{h.count} * sizeof(float), where_, ": ",
                 op_name(h.op), " from ", who(w), " carries ", payload, " bytes, header says ",
                 h.count, " floats");
  if (h.op == Op::kPush) push_bytes_in_ += payload;
  // An early bsp push keeps the receive buffer (loop() swaps in a spare) instead of a copy.
  take_slot_buffer_ = h.op == Op::kPush && core_ && core_->would_wait(w, h.chunk) &&
                      static_cast<double>(bytes) >=
                          opt_.hold_min_fill * static_cast<double>(slots_.front().buf.size());
  on_message(h, floats ? reinterpret_cast<const float*>(buf + sizeof(PsHeader)) : nullptr,
             floats ? std::string() : text_of(buf, bytes), w, take_slot_buffer_);
}

// A push whose data waits in the worker's segment (a header with no payload).
const float* ServerLoop::shared_push(const PsHeader& h, int w) {
  const SharedSegment* seg = worker_seg_[static_cast<std::size_t>(w)].get();
  const auto it = chunk_begin_.find(h.chunk);
  const std::size_t bytes = std::size_t{h.count} * sizeof(float);
  STARRING_CHECK(
      seg && it != chunk_begin_.end() && it->second * sizeof(float) + bytes <= seg->bytes(), where_,
      ": push of chunk ", h.chunk, " from ", who(w),
      " carries no data and is not in a shared segment this server maps");
  shm_worker_[static_cast<std::size_t>(w)] = 1;
  bytes_in_ += bytes;
  push_bytes_in_ += bytes;
  shm_push_bytes_ += bytes;
  if (local_) local_->shm_recv.fetch_add(bytes, std::memory_order_relaxed);
  return seg->floats() + it->second;
}

void ServerLoop::handle_local(const LocalMsg& m) {
  const int w = group_.worker_index(rank_);
  if (m.h.op == Op::kPush) local_push_bytes_ += std::size_t{m.h.count} * sizeof(float);
  on_message(m.h, m.data, m.text, w, true);
}

void ServerLoop::on_message(const PsHeader& h, const float* data, const std::string& text, int w,
                            bool kept) {
  last_heard_[static_cast<std::size_t>(w)] = Clock::now();
  switch (h.op) {
    case Op::kInit:
      on_init(w, text);
      break;
    case Op::kInitParams:
      STARRING_CHECK(core_ && w == 0, where_, ": unexpected initial parameters from ", who(w));
      core_->set_params(h.chunk, data, h.count);
      maybe_ack();
      break;
    case Op::kPush:
      on_push(h, data, w, kept);
      break;
    case Op::kHeartbeat:
      ++heartbeats_in_;
      break;
    case Op::kGetState:
      on_get_state(h, w);
      break;
    case Op::kSetState:
      on_set_state(h, data, w);
      break;
    case Op::kDone:
      STARRING_CHECK(!done_[static_cast<std::size_t>(w)], where_, ": ", who(w), " said done twice");
      done_[static_cast<std::size_t>(w)] = 1;
      finished_ = ++done_count_ == workers_;
      break;
    case Op::kAbort:
      done_[static_cast<std::size_t>(w)] = 1;  // it is gone: do not send it anything more
      if (h.step == 1) throw TimeoutError(where_ + ": stopping, " + who(w) + " failed: " + text);
      throw Error(where_ + ": stopping, " + who(w) + " failed: " + text);
    default:
      throw Error(where_ + ": unexpected " + op_name(h.op) + " message from " + who(w));
  }
}

void ServerLoop::on_init(int w, const std::string& init) {
  nlohmann::json j, shm;
  PsInitSpec spec;
  try {
    j = nlohmann::json::parse(init);
    if (j.contains("shm")) {  // the worker's own segment, not part of what the workers agree on
      shm = j["shm"];
      j.erase("shm");
    }
    spec = PsInitSpec::from_json(j);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where_ + ": the start message from " + who(w) + " (" + std::to_string(init.size()) +
                " bytes) is not a start spec: " + e.what());
  }
  const std::string text = j.dump();
  STARRING_CHECK(spec.num_workers == workers_ && spec.server_index == index_, where_,
                 ": start message from ", who(w), " is for server ", spec.server_index, " of a job",
                 " with ", spec.num_workers, " workers; this is server ", index_, " with ",
                 workers_, " workers (the ranks disagree on --servers)");
  STARRING_CHECK(spec.chunk_bytes <= opt_.chunk_bytes, where_, ": ", who(w), " uses chunks of ",
                 spec.chunk_bytes, " bytes, this server was set up for ", opt_.chunk_bytes);
  if (init_text_.empty()) {
    init_text_ = text;
    if (opt_.shared_memory) params_seg_ = SharedSegment::create(spec.total * sizeof(float));
    core_ = std::make_unique<ShardServer>(spec, params_seg_ ? params_seg_->floats() : nullptr);
    for (const auto& c : spec.chunks) chunk_begin_[c.id] = c.begin;
  } else {
    STARRING_CHECK(text == init_text_, where_, ": workers disagree on the model or the parameter",
                   "-server options: ", who(0), " sent ", init_text_.substr(0, 300), "; ", who(w),
                   " sent ", text.substr(0, 300));
  }
  if (params_seg_ && !shm.is_null() && !is_local(w)) {
    auto seg = SharedSegment::open(shm);
    if (seg && seg->bytes() >= spec.total * sizeof(float))
      worker_seg_[static_cast<std::size_t>(w)] = std::move(seg);
  }
  ++inits_;
  maybe_ack();
}

void ServerLoop::maybe_ack() {
  if (acked_ || inits_ < workers_ || !core_ || !core_->all_params_set()) return;
  test_stop_point("server-start", rank_);
  acked_ = true;
  for (int w = 0; w < workers_; ++w) {
    // Tells each worker whether we map its segment, and where our parameters are.
    std::string text;
    if (worker_seg_[static_cast<std::size_t>(w)])
      text = nlohmann::json{{"reads_shm", true}, {"shm", params_seg_->describe()}}.dump();
    send_ctl(w, Op::kAck, text, false);
  }
}

void ServerLoop::on_push(const PsHeader& h, const float* data, int w, bool kept) {
  STARRING_CHECK(acked_, where_, ": push from ", who(w), " before the start handshake finished");
  maybe_fault(h.step);
  const double t0 = opt_.trace ? opt_.trace->now_us() : 0;
  const auto start = Clock::now();
  const std::uint64_t updates_before = core_->updates();
  replies_.clear();
  // A worker owed nothing until now: its wait, and heartbeat_held's count, start here.
  if (core_->awaiting(w) == 0) last_told_[static_cast<std::size_t>(w)] = start;
  core_->push(w, h.chunk, h.step, h.lr, data, h.count, replies_, kept);
  if (!replies_.empty()) {  // the round of this chunk is summed: held receive buffers are free
    auto it = held_bufs_.find(h.chunk);
    if (it != held_bufs_.end()) {
      for (auto& b : it->second) spare_bufs_.push_back(std::move(b));
      held_bufs_.erase(it);
    }
  }
  send_replies(replies_);
  const double busy = seconds_since(start);
  busy_s_ += busy;
  if (first_step_ < 0) first_step_ = h.step;
  if (const std::int64_t k = h.step - first_step_; k >= 0 && k < opt_.untimed_steps) {
    if (busy_by_step_.size() <= static_cast<std::size_t>(k))
      busy_by_step_.resize(static_cast<std::size_t>(k) + 1, 0.0);
    busy_by_step_[static_cast<std::size_t>(k)] += busy;
  }
  // The push that completes a round (bsp: the last worker's; ssp/asp: every push) also runs the
  // optimizer on the chunk: named "push+apply" so a timeline shows where the server applies.
  const bool applied = core_->updates() != updates_before;
  if (opt_.trace && opt_.trace->enabled())
    opt_.trace->complete(
        applied ? "push+apply" : "push", "server", t0, opt_.trace->now_us() - t0,
        {{"chunk", h.chunk}, {"worker", w}, {"step", static_cast<double>(h.step)}});
}

void ServerLoop::send_replies(std::vector<PsReply>& replies) {
  const PsReply* local = nullptr;  // delivered last: the other workers' replies are on their way
  const auto now = Clock::now();
  for (const PsReply& r : replies) {
    if (done_[static_cast<std::size_t>(r.worker)]) continue;
    last_told_[static_cast<std::size_t>(r.worker)] = now;
    const std::size_t bytes = r.count * sizeof(float);
    if (is_local(r.worker)) {
      local = &r;
      continue;
    }
    const int dst = group_.worker_ranks[static_cast<std::size_t>(r.worker)];
    bytes_out_ += bytes;
    reply_bytes_out_ += bytes;
    ++msgs_out_;
    PendingSend p;
    p.worker = r.worker;
    p.what = "the reply for chunk " + std::to_string(r.chunk);
    p.since = Clock::now();
    if (r.stable && shm_worker_[static_cast<std::size_t>(r.worker)]) {
      // The worker copies the values out of our segment; they stay until it pushes again.
      p.req = comm_->isend(r.data, 0, dst, kReplyTagBase + r.chunk);
      shm_reply_bytes_ += bytes;
      if (local_) local_->shm_sent.fetch_add(bytes, std::memory_order_relaxed);
      sends_.push_back(std::move(p));
      continue;
    }
    std::shared_ptr<const void> keep;
    const float* src = r.data;
    if (!r.stable) {  // the values may change before the send completes: send a snapshot
      auto copy = std::make_shared<std::vector<float>>(r.data, r.data + r.count);
      src = copy->data();
      keep = copy;
    }
    p.req = comm_->isend(src, bytes, dst, kReplyTagBase + r.chunk);
    p.keep = std::move(keep);
    p.reads_params = r.stable;
    sends_.push_back(std::move(p));
  }
  if (local) {
    std::memcpy(local_->worker_params + (local->data - core_->params()), local->data,
                local->count * sizeof(float));
    local_->on_reply(local->chunk);
  }
}

void ServerLoop::send_ctl(int w, Op op, const std::string& text, bool timeout) {
  if (is_local(w)) {
    local_->on_ctl(op, text, timeout);
    return;
  }
  PsHeader h;
  h.op = op;
  h.worker = index_;
  h.step = timeout ? 1 : 0;
  auto msg = std::make_shared<std::vector<char>>(make_text_message(h, text));
  PendingSend p;
  {  // booked as control with the Comm's count of it (see LocalLink::count_mu)
    const auto counting = LocalLink::counting(local_);
    if (local_) local_->ctl_sent.fetch_add(msg->size(), std::memory_order_release);
    p.req = comm_->isend(msg->data(), msg->size(), group_.worker_ranks[static_cast<std::size_t>(w)],
                         kCtlTag);
  }
  p.worker = w;
  p.what = std::string("the ") + op_name(op) + " message";
  p.since = Clock::now();
  bytes_out_ += msg->size();
  ctl_bytes_out_ += msg->size();
  ++msgs_out_;
  p.keep = std::move(msg);
  sends_.push_back(std::move(p));
}

bool ServerLoop::complete_sends() {
  bool any = false;
  for (std::size_t i = 0; i < sends_.size();) {
    if (sends_[i].req->test()) {
      sends_[i] = std::move(sends_.back());
      sends_.pop_back();
      any = true;
    } else {
      ++i;
    }
  }
  return any;
}

void ServerLoop::maybe_fault(std::int64_t step) {
  if (fault_rank_ != rank_ || step < fault_step_) return;
  announce_fault(where_, fault_kind_, step);
  if (fault_kind_ == "kill") std::raise(SIGKILL);
  std::this_thread::sleep_for(opt_.timeout * 3 + Seconds(1));
  for (auto& w : done_) w = 1;  // the workers have given up on us: tell nobody anything
  throw Error(where_ + ": --fault " + opt_.fault + " injected");
}

void ServerLoop::abort_all(const std::string& why, bool timeout) {
  // A send that fails here is not the news: the error being handled is (run() rethrows it).
  for (int w = 0; w < workers_; ++w) {
    try {
      if (!done_[static_cast<std::size_t>(w)]) send_ctl(w, Op::kAbort, why, timeout);
    } catch (const std::exception&) {
    }
  }
  // Best effort: give the messages a moment to leave, never wait on a dead peer for long.
  const auto deadline =
      Clock::now() +
      std::min<Clock::duration>(std::chrono::duration_cast<Clock::duration>(opt_.timeout),
                                std::chrono::seconds(1));
  Backoff backoff;
  try {
    while (!sends_.empty() && Clock::now() < deadline) {
      complete_sends();
      backoff.idle();
    }
  } catch (const std::exception&) {
  }
  release_sends();
}

// A send not complete when it is released may still be read by MPI afterwards (a stopped worker
// that goes on and takes it, the transport's own progress): its message or snapshot is kept,
// and so are the parameters (the ShardServer's, or the shared segment they live in) when it is a
// stable reply sent straight from them. All were freed with the server.
void ServerLoop::release_sends() noexcept {
  bool params_read = false;
  for (PendingSend& p : sends_) {
    if (!release_unfinished(p.req)) continue;
    keep_for_process(std::move(p.keep));
    params_read |= p.reads_params;
  }
  sends_.clear();
  if (!params_read) return;
  try {
    keep_for_process(std::shared_ptr<const void>(std::move(core_)));
    keep_for_process(std::shared_ptr<const void>(std::move(params_seg_)));
  } catch (...) {  // no memory for a shared owner: leaked all the same, never freed under MPI
    (void)core_.release();
    (void)params_seg_.release();
  }
}

void ServerLoop::finish() {
  test_stop_point("server-end", rank_);
  // Every worker has sent its last message (kDone), so nothing of this session can still arrive:
  // cancel the posted receives BEFORE the goodbye, since a worker that has its goodbye may start
  // a new session on the same Comm whose first messages must not land in these slots.
  for (auto& s : slots_) s.req.reset();
  wall_s_ = seconds_since(started_);
  const std::string text = stats().dump();
  for (int w = 0; w < workers_; ++w) send_ctl(w, Op::kBye, text, false);
  Backoff backoff;
  while (!sends_.empty()) {
    complete_sends();
    if (!sends_.empty()) {
      check_liveness();
      backoff.idle();
    }
  }
}

}  // namespace starring::ps
