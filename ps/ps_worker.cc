#include "ps/ps_worker.h"

#include <algorithm>
#include <cstring>

#include "common/census.h"
#include "common/error.h"

namespace starring::ps {

using Clock = std::chrono::steady_clock;

PsWorkerOptions worker_options(const SyncConfig& sync, Trace* trace) {
  PsWorkerOptions o;
  o.timeout = Seconds(sync.timeout_s);
  o.bucket_mb = sync.bucket_mb;
  o.chunk_bytes = sync.ps_chunk_bytes;
  o.partition = sync.ps_partition;
  o.consistency = sync.consistency;
  o.staleness = sync.staleness;
  o.overlap = sync.overlap;
  o.shared_memory = sync.ps_shared_memory;
  o.trace = trace;
  return o;
}

PsWorker::PsWorker(std::shared_ptr<Comm> comm, PsGroup group, PsWorkerOptions opt)
    : comm_(std::move(comm)), group_(std::move(group)), opt_(std::move(opt)) {
  rank_ = comm_->rank();
  index_ = group_.worker_index(rank_);
  STARRING_CHECK(index_ >= 0, "rank ", rank_, " is not a parameter-server worker");
  STARRING_CONFIG_CHECK(opt_.timeout.count() > 0, "--timeout must be positive");
  STARRING_CONFIG_CHECK(opt_.chunk_bytes >= sizeof(float) && opt_.chunk_bytes <= (1u << 30),
                        "--ps-chunk-bytes must be between 4 bytes and 1 GiB, got ",
                        opt_.chunk_bytes);
  where_ = "rank " + std::to_string(rank_) + " (worker " + std::to_string(index_) + ")";
  heartbeat_msg_.op = Op::kHeartbeat;  // never changes: sends of it may overlap
  heartbeat_msg_.worker = index_;
}

PsWorker::~PsWorker() {
  try {
    shutdown();
  } catch (...) {
    // Destructors never throw; the error was reported by the call that saw it.
  }
}

Seconds PsWorker::grace() const {
  return std::clamp(opt_.timeout * 0.5, Seconds(0.5), Seconds(10.0));
}

int PsWorker::server_rank(int chunk) const {
  return group_.server_ranks[static_cast<std::size_t>(plan_.chunks[chunk].server)];
}

bool PsWorker::local_chunk(int chunk) const { return link_ && server_rank(chunk) == rank_; }

void PsWorker::start(const ParamLayout& layout, SyncBuffers buffers, const OptimizerConfig& opt) {
  STARRING_CHECK(!started_, where_, ": PsWorker::start called twice");
  STARRING_CHECK(!buffers.on_device, "backend 'ps' works on host buffers");
  // A plan the servers cannot serve fails before anything starts, so that shutdown() has nothing
  // to stop; dedicated servers, already waiting for the start message, are told why (kAbort) and
  // stop with this message instead of taking the workers' clean-up for a finished run.
  try {
    make_start_plan(layout);
  } catch (const ConfigError& e) {
    abandon(e.what());
    throw;
  }
  started_ = true;
  buf_ = buffers;
  opt_cfg_ = opt;
  const std::size_t n = plan_.chunks.size();
  requested_.assign(n, 0);
  completed_.assign(n, 0);
  flights_.resize(n);
  ready_.assign(layout.num_tensors(), 0);
  bucket_ready_.assign(plan_.tensors_of_bucket.size(), 0);
  all_chunks_.resize(n);
  for (std::size_t c = 0; c < n; ++c) all_chunks_[c] = static_cast<int>(c);
  bye_text_.assign(static_cast<std::size_t>(group_.num_servers()), "");
  bye_seen_.assign(static_cast<std::size_t>(group_.num_servers()), 0);
  acks_.assign(static_cast<std::size_t>(group_.num_servers()), 0);
  server_alive_at_.assign(static_cast<std::size_t>(group_.num_servers()), Clock::time_point{});
  last_sent_.assign(static_cast<std::size_t>(group_.num_servers()), Clock::now());
  pulse_.bind_to_this_thread();
  last_counters_ = counters();
  server_seg_.resize(static_cast<std::size_t>(group_.num_servers()));
  if (opt_.shared_memory && group_.num_servers() > (group_.colocated ? 1 : 0))
    push_seg_ = SharedSegment::create(layout.total() * sizeof(float));
  if (group_.colocated) start_local_server();
  comm_thread_ = std::thread([this] { comm_main(); });
  send_init(layout);
  // --timeout + grace, as for a push's reply or the goodbye (it was 2 x (--timeout + grace)):
  // every server acknowledges once every worker's start message is in, and a worker it does not
  // hear from within --timeout of its own start is named by the server, which stops and tells
  // the others why (kAbort) before this wait ends; so this one runs out only on a server that is
  // stopped, stuck or much slower to start, and names it. Co-located, this rank's own shard may
  // fail without a word to its worker (before its loop runs, e.g. posting its receives): its
  // error ends the wait at once, as it ends the goodbye's, instead of a silence named later.
  const std::vector<int> none(acks_.size(), 0), one(acks_.size(), 1);
  wait_acks(none, one, "the servers' start acknowledgements", "start acknowledgement");
}

void PsWorker::wait_acks(const std::vector<int>& before, const std::vector<int>& owed,
                         const char* what, const char* missing) {
  const std::size_t n = owed.size();
  auto acked = [&] {  // by server index: all its acknowledgements came (under mu_)
    std::vector<char> done(n);
    for (std::size_t s = 0; s < n; ++s) done[s] = acks_[s] - before[s] >= owed[s];
    return done;
  };
  wait_for(
      [&] {
        const std::vector<char> done = acked();
        return server_error_ || std::find(done.begin(), done.end(), 0) == done.end();
      },
      what, false, opt_.timeout + grace(),
      [&] {
        return "; no " + std::string(missing) + " from " + servers_without(acked()) +
               " (stopped, stuck or slow)";
      });
  std::lock_guard<std::mutex> lk(mu_);
  if (server_error_) std::rethrow_exception(server_error_);
}

std::string PsWorker::servers_without(const std::vector<char>& seen) const {
  std::vector<int> ranks;  // "server rank 2", "server ranks 2 and 3"
  for (std::size_t s = 0; s < seen.size(); ++s)
    if (!seen[s]) ranks.push_back(group_.server_ranks[s]);
  return "server " + rank_list(ranks);
}

void PsWorker::make_start_plan(const ParamLayout& layout) {
  const auto bucket_bytes = static_cast<std::size_t>(opt_.bucket_mb * 1024 * 1024);
  plan_ = make_plan(layout, group_.num_servers(), slicer_by_name(opt_.partition), opt_.chunk_bytes,
                    bucket_bytes);
  for (int s = 0; s < group_.num_servers(); ++s)
    STARRING_CONFIG_CHECK(!plan_.chunks_of_server[static_cast<std::size_t>(s)].empty(),
                          "parameter server ", s, " would own no part of the model (",
                          layout.num_tensors(), " tensors, ", layout.total(), " floats, ",
                          group_.num_servers(), " servers, --ps-partition ", opt_.partition,
                          "): use fewer servers");
  STARRING_CONFIG_CHECK(plan_.chunks.size() <= static_cast<std::size_t>(kMaxChunks),
                        "the model makes ", plan_.chunks.size(),
                        " parameter-server chunks, more than the ", kMaxChunks,
                        " the protocol has reply tags for (--ps-chunk-bytes ", opt_.chunk_bytes,
                        "); raise --ps-chunk-bytes");
}

void PsWorker::start_local_server() {
  link_ = std::make_unique<LocalLink>();
  link_->worker_params = buf_.params;
  link_->on_reply = [this](int chunk) { on_reply(chunk); };
  link_->on_ctl = [this](Op op, const std::string& text, bool timeout) {
    on_ctl(op, text, timeout, group_.server_index(rank_));
  };
  ServerOptions so;
  so.timeout = opt_.timeout;
  so.chunk_bytes = opt_.chunk_bytes;
  so.fault = opt_.fault;
  so.shared_memory = opt_.shared_memory;
  so.trace = opt_.trace;
  server_thread_ = std::thread([this, so] {
    try {
      ServerLoop loop(comm_, group_, so, link_.get());
      local_server_stats_ = loop.run();
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      server_error_ = std::current_exception();
      cv_.notify_all();  // a goodbye wait ends: this shard will not say goodbye
    }
  });
}

void PsWorker::send_init(const ParamLayout& layout) {
  PendingSends sends(*comm_);
  const std::size_t cap = max_request_bytes(opt_.chunk_bytes);
  for (int s = 0; s < group_.num_servers(); ++s) {
    PsInitSpec spec;
    spec.num_workers = group_.num_workers();
    spec.server_index = s;
    spec.total = layout.total();
    spec.chunk_bytes = opt_.chunk_bytes;
    spec.consistency = opt_.consistency;
    spec.staleness = opt_.staleness;
    spec.update = opt_.update;
    spec.opt = opt_cfg_;
    for (int c : plan_.chunks_of_server[static_cast<std::size_t>(s)])
      spec.chunks.push_back({c, plan_.chunks[c].begin, plan_.chunks[c].count});
    PsHeader h;
    h.op = Op::kInit;
    h.worker = index_;
    nlohmann::json j = spec.to_json();
    if (push_seg_) j["shm"] = push_seg_->describe();  // not part of what the workers agree on
    const std::string text = j.dump();
    STARRING_CONFIG_CHECK(sizeof(PsHeader) + text.size() <= cap, "the parameter-server start ",
                          "message is too large (", text.size(), " bytes): raise --ps-chunk-bytes");
    const int dst = group_.server_ranks[static_cast<std::size_t>(s)];
    const bool local = link_ && dst == rank_;
    if (local) {
      link_->post({h, nullptr, text});
    } else {
      // Whole, as checked above: make_text_message would cut it to a control message's size.
      h.count = static_cast<std::uint32_t>(text.size());
      sends.send(make_message(h, text.data(), text.size()), dst, kReqTag);
    }
    if (index_ != 0) continue;
    for (int c : plan_.chunks_of_server[static_cast<std::size_t>(s)]) {
      const auto& ch = plan_.chunks[c];
      h.op = Op::kInitParams;
      h.chunk = c;
      h.count = static_cast<std::uint32_t>(ch.count);
      if (local) {
        link_->post({h, buf_.params + ch.begin, {}});
      } else {
        sends.send(make_message(h, buf_.params + ch.begin, ch.count * sizeof(float)), dst, kReqTag);
      }
    }
  }
  sends.wait(opt_.timeout);
}

void PsWorker::rethrow_if_failed() {
  if (error_) std::rethrow_exception(error_);
}

// Waits (under mu_) until ready() holds or the comm thread reports an error. The comm thread
// enforces the real deadlines; this one is a safety net in case it is itself stuck. It wakes at
// least every 20 ms, so that, as there, this thread's own pauses (common/watch_clock.h) do not
// count.
void PsWorker::wait_for(const std::function<bool()>& ready, const char* what, bool count_wait,
                        Seconds limit_given, const std::function<std::string()>& silent) {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  rethrow_if_failed();
  if (ready()) return;
  const auto limit = limit_given > Seconds(0) ? limit_given : opt_.timeout * 2 + grace() * 2;
  auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(limit);
  WatchClock watch(opt_.timeout, t0);
  while (!ready()) {
    rethrow_if_failed();
    const auto now = Clock::now();
    deadline += watch.check(now);
    // A server's heartbeat (bsp/ssp: it holds our reply for a slower, live worker) renews the wait.
    deadline =
        std::max(deadline, server_alive_last_ + std::chrono::duration_cast<Clock::duration>(limit));
    if (now >= deadline)
      throw TimeoutError(detail::concat(where_, ": timeout after ", limit.count(),
                                        " s waiting for ", what, " (this thread ", watch.summary(),
                                        ")", silent ? silent() : std::string()));
    cv_.wait_until(lk, std::min(deadline, now + std::chrono::milliseconds(20)));
  }
  if (count_wait) wait_s_ += Seconds(Clock::now() - t0).count();
}

void PsWorker::wait_chunks(const std::vector<int>& chunks, const char* what) {
  wait_for(
      [&] {
        for (int c : chunks)
          if (completed_[c] != requested_[c]) return false;
        return true;
      },
      what, true);
}

void PsWorker::begin_step(std::int64_t step, float lr) {
  STARRING_CHECK(started_ && !shut_, where_, ": begin_step outside start()..shutdown()");
  step_ = step;
  lr_ = lr;
  pulse_.mark();
  std::lock_guard<std::mutex> lk(mu_);
  rethrow_if_failed();
}

void PsWorker::tensor_ready(std::size_t i) {
  STARRING_CHECK(i < ready_.size() && !ready_[i], where_, ": tensor_ready(", i, ") ",
                 i < ready_.size() ? "called twice in one step" : "out of range");
  ready_[i] = 1;
  pulse_.mark();
  const auto b = static_cast<std::size_t>(plan_.bucket_of_tensor[i]);
  if (++bucket_ready_[b] < static_cast<int>(plan_.tensors_of_bucket[b].size())) return;
  bucket_ready_[b] = 0;
  for (int t : plan_.tensors_of_bucket[b]) ready_[static_cast<std::size_t>(t)] = 0;
  held_.push_back(static_cast<int>(b));
  if (!opt_.overlap && held_.size() < plan_.tensors_of_bucket.size()) return;
  for (int hb : held_) {
    const auto& chunks = plan_.chunks_of_bucket[static_cast<std::size_t>(hb)];
    // The previous round of these chunks must have landed before they are pushed again.
    wait_chunks(chunks, "the previous step's parameters");
    std::lock_guard<std::mutex> lk(mu_);
    for (int c : chunks) ++requested_[c];
    jobs_.push_back({hb, step_, lr_});
  }
  held_.clear();
  cv_.notify_all();
}

void PsWorker::wait_params(std::size_t i) {
  STARRING_CHECK(i < plan_.chunks_of_tensor.size(), where_, ": wait_params(", i, ") out of range");
  wait_chunks(opt_.overlap ? plan_.chunks_of_tensor[i] : all_chunks_,
              "updated parameters from the servers");
  pulse_.mark();
}

void PsWorker::flush() {
  if (!started_) return;
  wait_chunks(all_chunks_, "all outstanding parameters");
}

SyncStepStats PsWorker::take_stats() {
  SyncStepStats s;
  const CommCounters now = counters();
  s.bytes_sent = now.bytes_sent - last_counters_.bytes_sent;
  s.bytes_recv = now.bytes_recv - last_counters_.bytes_recv;
  last_counters_ = now;
  std::lock_guard<std::mutex> lk(mu_);
  s.wait_s = wait_s_;
  s.comm_s = comm_s_;
  s.extra["push_s"] = push_s_;
  s.extra["pull_s"] = pull_s_;
  s.extra["stage_s"] = stage_s_;
  s.extra["ps_rounds"] = static_cast<double>(steps_done_);
  wait_s_ = comm_s_ = push_s_ = pull_s_ = stage_s_ = 0;
  steps_done_ = 0;
  return s;
}

CommCounters PsWorker::counters() const {
  // Co-located: the shard's set-up and control messages are booked (setup_recv, ctl_sent) under
  // count_mu together with the Comm's count of them, so reading both under it takes them out
  // exactly (a heartbeat counted and not yet booked made a step read 32 bytes high).
  const auto counting = LocalLink::counting(link_.get());
  const std::uint64_t setup = link_ ? link_->setup_recv.load(std::memory_order_acquire) : 0;
  std::unique_lock<std::mutex> hb(hb_mu_);
  CommCounters c = comm_->counters();
  c.bytes_sent -= hb_sent_;  // heartbeats are control too (a worker that waited long sent some)
  c.bytes_recv -= hb_recv_;  // and the servers' (bsp/ssp)
  hb.unlock();
  const std::uint64_t ctl = link_ ? link_->ctl_sent.load(std::memory_order_acquire) : 0;
  c.bytes_sent += shm_sent_.load(std::memory_order_relaxed);
  c.bytes_recv += shm_recv_.load(std::memory_order_relaxed);
  if (link_) {  // co-located: this process's shard's traffic too, less set-up and control
    c.bytes_sent += link_->shm_sent.load(std::memory_order_relaxed);
    c.bytes_recv += link_->shm_recv.load(std::memory_order_relaxed);
    c.bytes_recv -= setup;
    c.bytes_sent -= ctl;
  }
  return c;
}

void PsWorker::abandon(const std::string& why) {
  if (started_ || shut_) return;
  shut_ = true;
  if (!group_.colocated) send_abort(why, false);
}

void PsWorker::shutdown() {
  if (shut_ || !started_) {
    shut_ = true;
    return;
  }
  shut_ = true;
  // Failing (Trainer::run's failure path: a peer silent in a checkpoint's barrier or the
  // evaluation): no goodbye, which waited up to 2 x --timeout + grace for servers that may wait
  // for that peer themselves (a co-located shard for a stopped worker 0: the job ended 24 s after
  // the stop with --timeout 5). The comm thread ends with this error and tells the servers why
  // (as on its own failures), so they stop at once; the caller rethrows its own error.
  const std::exception_ptr failing = std::current_exception();
  std::exception_ptr err;
  if (!failing) {
    try {
      flush();
      PsHeader h;
      h.op = Op::kDone;
      h.worker = index_;
      for (int s = 0; s < group_.num_servers(); ++s) {
        const int dst = group_.server_ranks[static_cast<std::size_t>(s)];
        if (link_ && dst == rank_)
          link_->post({h, nullptr, {}});
        else
          comm_->send(&h, sizeof(h), dst, kReqTag, opt_.timeout);
      }
      const int servers = group_.num_servers();
      // --timeout + grace, as for a push's reply (a silent server): the workers got here
      // together (the last evaluation and checkpoint wait for each other within --timeout),
      // and each server says goodbye once every worker's kDone is in; the general 2 x (--timeout
      // + grace) made a server stopped after the last step cost 19 s at --timeout 5. A timeout
      // names the servers that are silent (stopped, stuck). Co-located, this rank's own shard
      // names a silent worker within --timeout of its last message (which may come after ours)
      // and ends the wait with that error, a better one than the goodbyes missing because of
      // it: the wait is then only a safety net.
      wait_for([&] { return byes_ == servers || server_error_; }, "the servers' goodbye", false,
               (opt_.timeout + grace()) * (group_.colocated ? 2 : 1),
               [&] {
                 return "; no goodbye from " + servers_without(bye_seen_) +
                        " (stopped, stuck or slow)";
               });
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (server_error_) std::rethrow_exception(server_error_);
      }
    } catch (...) {
      err = std::current_exception();
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = err;
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failing && !error_) error_ = failing;
    stop_ = true;
  }
  cv_.notify_all();
  if (comm_thread_.joinable()) comm_thread_.join();
  if (server_thread_.joinable()) server_thread_.join();
  if (failing) return;
  if (err) std::rethrow_exception(err);
  if (server_error_) std::rethrow_exception(server_error_);
}

nlohmann::json PsWorker::server_stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : bye_text_)
    out.push_back(t.empty() ? nlohmann::json() : nlohmann::json::parse(t));
  return out;
}

}  // namespace starring::ps
