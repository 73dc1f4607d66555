// The PsWorker's communication thread: issues the pushes of each ready bucket, polls the
// outstanding sends and replies (which is what lets Open MPI move them while the trainer
// computes), receives the servers' control messages, and enforces the reply deadlines.
#include <cstring>

#include "common/clock.h"
#include "common/error.h"
#include "ps/backoff.h"
#include "ps/ps_worker_impl.h"

namespace starring::ps {

static double seconds(Clock::duration d) { return Seconds(d).count(); }

void PsWorker::Impl::comm_main() {
  if (opt_.trace) opt_.trace->set_thread_name("comm");
  try {
    comm_loop();
  } catch (...) {
    fail(std::current_exception());
  }
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lk(mu_);
    e = error_;
  }
  if (e) {
    try {
      std::rethrow_exception(e);
    } catch (const TimeoutError& t) {
      send_abort(t.what(), true);
    } catch (const std::exception& x) {
      send_abort(x.what(), false);
    }
  }
  for (auto& f : flights_) f.recv.reset();  // cancels receives into the parameter buffer
  ctl_req_.reset();
  release_sends();
}

void PsWorker::Impl::release_sends() {
  for (auto& f : flights_)
    if (release_unfinished(f.send)) keep_for_process(std::move(f.staging));
  bool heartbeat_in_flight = false;
  for (auto& r : heartbeats_) heartbeat_in_flight |= release_unfinished(r);
  heartbeats_.clear();
  if (heartbeat_in_flight) keep_for_process(std::move(heartbeat_msg_));
}

void PsWorker::Impl::comm_loop() {
  ctl_buf_.resize(kMaxCtlBytes);
  ctl_req_ = comm_->irecv(ctl_buf_.data(), ctl_buf_.size(), kAnySource, kCtlTag);
  last_heartbeat_ = Clock::now();
  watch_ = WatchClock(opt_.timeout, last_heartbeat_);
  Backoff backoff;
  while (true) {
    std::deque<Job> jobs;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (error_) return;
      if (jobs_.empty() && active_.empty() && !stop_)
        cv_.wait_for(lk, std::chrono::milliseconds(1));  // nothing in flight: sleep
      if (stop_ && jobs_.empty() && active_.empty()) return;
      jobs.swap(jobs_);
    }
    bool progress = false;
    for (const Job& j : jobs) progress |= issue(j);
    progress |= poll_flights();
    progress |= poll_ctl();
    if (watch_.due(Clock::now())) check_deadlines();
    if (progress)
      backoff.reset();
    else if (!active_.empty())
      backoff.idle();
  }
}

// Pushes every chunk of a complete bucket: to this process's own shard through the LocalLink, to
// the others over the Comm, each with its reply's receive posted first. Traced on this thread's
// row ("comm") as "push bucket N": the gradients copied out and the messages posted.
bool PsWorker::Impl::issue(const Job& job) {
  open_window(job.step);
  const double t0 = tracing() ? opt_.trace->now_us() : 0;
  const auto& chunks = plan_.chunks_of_bucket[static_cast<std::size_t>(job.bucket)];
  std::size_t floats = 0;
  for (int c : chunks) {
    push_chunk(c, job);
    floats += plan_.chunks[static_cast<std::size_t>(c)].count;
  }
  if (tracing())
    opt_.trace->complete("push bucket " + std::to_string(job.bucket), "comm", t0,
                         opt_.trace->now_us() - t0,
                         {{"bucket", job.bucket},
                          {"step", static_cast<double>(job.step)},
                          {"bytes", static_cast<double>(floats * sizeof(float))},
                          {"chunks", static_cast<double>(chunks.size())}});
  return true;
}

// The first bucket of a new step opens its window (push, pull and comm times are measured in it).
void PsWorker::Impl::open_window(std::int64_t step) {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lk(mu_);
  if (step != win_step_) {
    win_step_ = step;
    win_start_ = now;
    win_sends_ = win_replies_ = 0;
  }
}

// The step's window on a row of its own ("push_pull step": a co-located shard's thread closes
// it): "push" until its last push has left (push_s), "pull" from then until its last reply
// (pull_s), the very times those measure. Called outside mu_.
void PsWorker::Impl::trace_window(const char* phase, Clock::time_point from, Clock::time_point to,
                                  std::int64_t step) const {
  const double from_us = opt_.trace->us_at(from);
  opt_.trace->complete_on(
      "push_pull step", phase, "comm", from_us, opt_.trace->us_at(to) - from_us,
      {{"step", static_cast<double>(step)}, {"chunks", static_cast<double>(plan_.chunks.size())}});
}

// A chunk handed to this process's own shard is counted as sent at once, before it is handed
// over: the shard may reply on its own thread before this one goes on (a bsp round this worker
// completes, asp), and a reply that closed the step's window before its push was counted
// measured the pull time from the previous step's last push (one step too long) and the push
// time past the last reply. A chunk sent over the Comm is counted when its send completes or its
// reply comes (count_push).
void PsWorker::Impl::push_chunk(int c, const Job& job) {
  const ChunkSpec& ch = plan_.chunks[static_cast<std::size_t>(c)];
  Flight& f = flights_[static_cast<std::size_t>(c)];
  f.since = Clock::now();
  f.step = job.step;
  f.trace_t0 = opt_.trace ? opt_.trace->now_us() : 0;
  ++f.issued;
  PsHeader h;
  h.op = Op::kPush;
  h.worker = index_;
  h.chunk = c;
  h.step = job.step;
  h.lr = job.lr;
  h.count = static_cast<std::uint32_t>(ch.count);
  last_sent_[static_cast<std::size_t>(ch.server)] = f.since;
  f.pushed = false;
  if (local_chunk(c)) {
    count_push(f);
    link_->post({h, buf_.grads + ch.begin, {}});
    return;
  }
  const int dst = server_rank(c);
  const std::size_t bytes = ch.count * sizeof(float);
  const bool listed = f.send || f.recv;  // still in active_
  if (f.send) {
    // The previous push's reply came before MPI reported its send complete (poll_flights):
    // the reply proves the data arrived, but MPI still owns the staging until the send is
    // completed, so it is completed before the staging is rewritten (at once in practice).
    f.send->wait(comm_->timeout());
    f.send.reset();
  }
  f.recv = comm_->irecv(buf_.params + ch.begin, bytes, dst, kReplyTagBase + c);
  const auto t0 = Clock::now();
  if (server_seg_[static_cast<std::size_t>(ch.server)]) {
    // The chunk goes into this worker's segment, where the server reads it; the message is
    // the header alone. The slot is rewritten only after this chunk's reply, when the server
    // is done with it.
    std::memcpy(push_seg_->floats() + ch.begin, buf_.grads + ch.begin, bytes);
    f.staging->assign(reinterpret_cast<const char*>(&h), reinterpret_cast<const char*>(&h + 1));
    shm_sent_.fetch_add(bytes, std::memory_order_relaxed);
  } else {
    f.staging->resize(sizeof(PsHeader) + bytes);
    std::memcpy(f.staging->data(), &h, sizeof(h));
    std::memcpy(f.staging->data() + sizeof(h), buf_.grads + ch.begin, bytes);
  }
  const double staged = seconds(Clock::now() - t0);
  f.send = comm_->isend(f.staging->data(), f.staging->size(), dst, kReqTag);
  if (!listed) active_.push_back(c);  // listed once: poll_flights would test it twice
  std::lock_guard<std::mutex> lk(mu_);
  stage_s_ += staged;
}

bool PsWorker::Impl::poll_flights() {
  bool progress = false;
  for (std::size_t k = 0; k < active_.size();) {
    const int c = active_[k];
    Flight& f = flights_[static_cast<std::size_t>(c)];
    if (f.send && f.send->test()) {
      f.send.reset();
      progress = true;
      count_push(f);
    }
    if (f.recv && f.recv->test()) {
      const std::size_t got = f.recv->status().bytes;
      const ChunkSpec& ch = plan_.chunks[static_cast<std::size_t>(c)];
      const std::size_t want = ch.count * sizeof(float);
      const SharedSegment* seg = server_seg_[static_cast<std::size_t>(ch.server)].get();
      STARRING_CHECK(got == want || (got == 0 && seg), where_, ": reply for chunk ", c,
                     " from server rank ", server_rank(c), " has ", got, " bytes, expected ", want);
      if (got == 0) {  // the parameters are in the server's segment (stable until our next push)
        copy_streaming(seg->floats() + ch.begin, buf_.params + ch.begin, ch.count);
        shm_recv_.fetch_add(want, std::memory_order_relaxed);
      }
      f.recv.reset();
      progress = true;
      count_push(f);  // the reply proves the push arrived, however late its send is seen done
      on_reply(c);
    }
    if (!f.send && !f.recv) {
      active_[k] = active_.back();
      active_.pop_back();
    } else {
      ++k;
    }
  }
  return progress;
}

// A push has left: the step's push time ends when its last one has. Counted once per push, at
// its send's completion or at its reply, whichever the thread sees first: MPI may report a send
// complete on a later test than the reply that proves it arrived, and a window closed by the
// replies first would measure pull time from the previous step's last push.
void PsWorker::Impl::count_push(Flight& f) {
  if (f.pushed) return;
  f.pushed = true;
  Clock::time_point from, to;
  std::int64_t step = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (++win_sends_ != plan_.chunks.size()) return;
    win_sent_ = Clock::now();
    push_s_ += seconds(win_sent_ - win_start_);
    from = win_start_;
    to = win_sent_;
    step = win_step_;
  }
  if (tracing()) trace_window("push", from, to, step);
}

// A chunk's updated parameters have landed (comm thread, or the co-located server thread).
void PsWorker::Impl::on_reply(int c) {
  const Flight& f = flights_[static_cast<std::size_t>(c)];
  // On a row per chunk: the chunks of a step are in flight together, and a co-located server
  // delivers its own chunk's reply on its thread, inside its push (rows must nest).
  if (tracing())
    opt_.trace->complete_on("push_pull chunk " + std::to_string(c), "push_pull", "comm", f.trace_t0,
                            opt_.trace->now_us() - f.trace_t0,
                            {{"chunk", c},
                             {"server", plan_.chunks[static_cast<std::size_t>(c)].server},
                             {"step", static_cast<double>(f.step)}});
  bool closed = false;
  Clock::time_point from, to;
  std::int64_t step = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++completed_[static_cast<std::size_t>(c)];
    if (++win_replies_ == plan_.chunks.size()) {
      // read under mu_: read before it, on the co-located shard's thread, it could precede the
      // push's end the comm thread set meanwhile (pull_s, and the trace's "pull", negative)
      const auto now = Clock::now();
      comm_s_ += seconds(now - win_start_);
      pull_s_ += seconds(now - win_sent_);
      ++steps_done_;
      closed = true;
      from = win_sent_;
      to = now;
      step = win_step_;
    }
  }
  if (closed && tracing()) trace_window("pull", from, to, step);
  cv_.notify_all();
}

bool PsWorker::Impl::poll_ctl() {
  // hb_mu_ only around a receive that is there (Request::may_be_done: no completion), as the
  // co-located shard's loop takes LocalLink::count_mu: held around every poll, the compute
  // thread's per-step counters() waited for it whenever this thread lost its core inside the
  // test (ps co-located np 4 on 2 cores: 0.5-8 ms a step in take_stats, counted as other).
  if (!ctl_req_->may_be_done()) return false;
  {  // a server's heartbeat is booked with the Comm's count of it (as this worker's: hb_mu_)
    std::lock_guard<std::mutex> lk(hb_mu_);
    if (!ctl_req_->test()) return false;
    const RecvStatus st = ctl_req_->status();
    if (st.bytes == sizeof(PsHeader) &&
        header_of(ctl_buf_.data(), st.bytes, where_).op == Op::kHeartbeat)
      hb_recv_ += st.bytes;
  }
  const RecvStatus st = ctl_req_->status();
  const PsHeader& h = header_of(ctl_buf_.data(), st.bytes, where_);
  const std::string text = text_of(ctl_buf_.data(), st.bytes);
  const int server = group_.server_index(st.source);
  STARRING_CHECK(server >= 0, where_, ": control message from rank ", st.source,
                 ", which is not a server");
  if (h.op == Op::kAck) open_server_segment(server, text);
  on_ctl(h.op, text, h.step == 1, server);
  ctl_req_ = comm_->irecv(ctl_buf_.data(), ctl_buf_.size(), kAnySource, kCtlTag);
  return true;
}

// A server's start acknowledgement (the only kAck with text) says whether it maps this worker's
// push segment and where its own parameters live; both directions go through shared memory
// only if both are reachable.
void PsWorker::Impl::open_server_segment(int server, const std::string& ack_text) {
  if (!push_seg_ || ack_text.empty()) return;
  const auto j = nlohmann::json::parse(ack_text, nullptr, false);
  if (!j.is_object() || !j.value("reads_shm", false) || !j.contains("shm")) return;
  auto seg = SharedSegment::open(j["shm"]);
  if (seg && seg->bytes() >= plan_.total * sizeof(float))
    server_seg_.at(static_cast<std::size_t>(server)) = std::move(seg);
}

// A server's report without its closing parenthesised details (a timeout's account of every
// worker: ~400 characters), for this worker's short line (Relayed::brief); the rank the server
// names comes before them. Empty when there are no such details to leave out.
static std::string without_details(const std::string& text) {
  constexpr std::size_t kDetails = 80;  // a shorter closing parenthesis is part of the gist
  if (text.empty() || text.back() != ')') return "";
  int depth = 0;
  for (std::size_t i = text.size(); i-- > 0;) {
    if (text[i] == ')') ++depth;
    if (text[i] != '(' || --depth > 0) continue;
    if (text.size() - i < kDetails) return "";
    std::size_t end = i;
    while (end > 0 && text[end - 1] == ' ') --end;
    return text.substr(0, end);
  }
  return "";
}

void PsWorker::Impl::on_ctl(Op op, const std::string& text, bool timeout, int server) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (op == Op::kAck) {
      ++acks_.at(static_cast<std::size_t>(server));
    } else if (op == Op::kHeartbeat) {  // bsp/ssp: it holds a reply back for a slower, live worker
      server_alive_at_.at(static_cast<std::size_t>(server)) = server_alive_last_ = Clock::now();
    } else if (op == Op::kBye) {
      ++byes_;
      bye_text_.at(static_cast<std::size_t>(server)) = text;
      bye_seen_.at(static_cast<std::size_t>(server)) = 1;
    } else if (op == Op::kAbort) {
      if (!error_) {
        // The server prints the whole report on its own line; this worker's, when it must print
        // one too (both miss the agreement: a worker is silent), is short and says where it is.
        // A co-located server's line is the line of the worker it shares a process with: that
        // worker's error is the whole report, not relayed (it gets its own server's report
        // first, in-process, when that server was the first to stop).
        const std::string head =
            where_ + ": stopped by parameter server " + std::to_string(server) + ": ";
        const bool own_server =
            link_ && group_.server_ranks.at(static_cast<std::size_t>(server)) == rank_;
        const std::string gist = without_details(text);
        const std::string brief = gist.empty()
                                      ? head + text
                                      : head + gist + " (the details: the server's own error line)";
        if (own_server)
          error_ = timeout ? std::make_exception_ptr(TimeoutError(head + text))
                           : std::make_exception_ptr(Error(head + text));
        else
          error_ = timeout ? std::make_exception_ptr(RelayedError<TimeoutError>(head + text, brief))
                           : std::make_exception_ptr(RelayedError<Error>(head + text, brief));
      }
    } else {
      if (!error_)
        error_ = std::make_exception_ptr(
            Error(where_ + ": unexpected " + op_name(op) + " message from a server"));
    }
  }
  cv_.notify_all();
}

// A reply's deadline counts only time this comm thread was watching, and no server is named
// while its reply is waiting to be polled (the rule of common/watch_clock.h, as on the servers): a
// comm thread that stood still past the deadline named a server whose reply had arrived.
void PsWorker::Impl::check_deadlines() {
  const auto now = Clock::now();
  const auto excused = watch_.check(now);
  const auto limit = opt_.timeout + grace();
  int late = -1;
  bool waiting = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (std::size_t c = 0; c < flights_.size(); ++c) {
      Flight& f = flights_[c];
      f.since = WatchClock::excuse(f.since, excused, now);
      if (f.issued <= completed_[c]) continue;
      waiting = true;
      const auto from =
          std::max(f.since, server_alive_at_[static_cast<std::size_t>(plan_.chunks[c].server)]);
      if (late < 0 && now - from > limit) late = static_cast<int>(c);
    }
  }
  if (late >= 0) {
    const Flight& f = flights_[static_cast<std::size_t>(late)];
    if (f.recv && f.recv->test()) return;  // its reply is waiting: poll_flights takes it next
    throw TimeoutError(detail::concat(
        where_, ": timeout after ", opt_.timeout.count(), " s waiting for server rank ",
        server_rank(late), local_chunk(late) ? " (the shard served by this process)" : "",
        ": no reply to the push of chunk ", late, " (step ", f.step, "; this worker's comm thread ",
        watch_.summary(), ")"));
  }
  if (now - last_heartbeat_ <= opt_.timeout / 4) return;
  // Only to a server this worker sent nothing else for timeout/4: a run whose steps are shorter
  // than that (every step pushes to every server) sends no more than before. Waiting for a reply
  // (or at a meeting): the servers that owe it none watch it for silence, the one that holds its
  // reply does not (ServerLoop::check_liveness). Every server got these heartbeats, so a bsp
  // worker that waited for a slower one heartbeated each every timeout/4 although it pushed to
  // each in every step (5 in a 3.1 s run at --timeout 4 s, steps of 10 ms: test_ps_long_step).
  if (waiting || at_meeting_.load(std::memory_order_relaxed)) {
    heartbeat(true);
    return;
  }
  // A trainer alive in a step (or an evaluation) longer than the servers' timeout (any
  // consistency).
  bool quiet = false;
  for (const auto& t : last_sent_) quiet |= now - t > opt_.timeout / 4;
  if (quiet && pulse_.alive_since_last_check(now)) heartbeat(true);
}

// Tells the servers that this worker is alive (see Op::kHeartbeat): waiting for a reply or for a
// slower worker at a meeting of the workers (waiting_for_workers), or its trainer alive in a long
// step (`only_quiet`, as check_deadlines sends them all: to the servers sent nothing for
// timeout/4).
void PsWorker::Impl::heartbeat(bool only_quiet) {
  const auto now = Clock::now();
  last_heartbeat_ = now;
  for (std::size_t k = 0; k < heartbeats_.size();)
    if (heartbeats_[k]->test()) {
      heartbeats_[k] = std::move(heartbeats_.back());
      heartbeats_.pop_back();
    } else {
      ++k;
    }
  for (int s = 0; s < group_.num_servers(); ++s) {
    const int dst = group_.server_ranks[static_cast<std::size_t>(s)];
    auto& sent = last_sent_[static_cast<std::size_t>(s)];
    if (only_quiet && now - sent <= opt_.timeout / 4) continue;
    sent = now;
    if (link_ && dst == rank_) {
      // This session's own link: one racing the kDone is taken or dropped with it, never a
      // next session's.
      if (!goodbye_.load(std::memory_order_relaxed))
        link_->post(
            {header_of(heartbeat_msg_->data(), heartbeat_msg_->size(), where_), nullptr, {}});
      continue;
    }
    std::lock_guard<std::mutex> lk(hb_mu_);
    if (goodbye_.load(std::memory_order_relaxed)) continue;  // before the kDone or not at all
    heartbeats_.push_back(
        comm_->isend(heartbeat_msg_->data(), heartbeat_msg_->size(), dst, kReqTag));
    hb_sent_ += heartbeat_msg_->size();
  }
}

void PsWorker::Impl::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_) error_ = e;
  }
  cv_.notify_all();
}

// Tells every server this worker has failed (best effort, never blocks for long).
void PsWorker::Impl::send_abort(const std::string& why, bool timeout) {
  PsHeader h;
  h.op = Op::kAbort;
  h.worker = index_;
  h.step = timeout ? 1 : 0;
  // kept for the process if a send of it is still in flight at the end (to a dead server)
  auto msg = std::make_unique<std::vector<char>>(make_text_message(h, why));
  std::vector<std::unique_ptr<Request>> reqs;
  for (int s = 0; s < group_.num_servers(); ++s) {
    const int dst = group_.server_ranks[static_cast<std::size_t>(s)];
    try {
      if (link_ && dst == rank_)
        link_->post({h, nullptr, why});
      else
        reqs.push_back(comm_->isend(msg->data(), msg->size(), dst, kReqTag));
    } catch (const std::exception&) {
    }
  }
  const auto wait = std::min(opt_.timeout, Seconds(1.0));
  bool in_flight = false;
  for (auto& r : reqs) {
    try {
      r->wait(wait);
    } catch (const std::exception&) {
    }
    in_flight |= release_unfinished(r);
  }
  if (in_flight) keep_for_process(std::move(msg));
}

}  // namespace starring::ps
