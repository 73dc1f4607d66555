// The PsWorker facade, and the trainer's per-step calls: tensor_ready queues a complete bucket
// for the comm thread (worker_comm.cc), wait_params waits for its chunks' replies.
#include "ps/ps_worker.h"

#include <algorithm>

#include "common/clock.h"
#include "common/error.h"
#include "ps/ps_worker_impl.h"

namespace starring::ps {

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

// PsWorker forwards every call to its Impl (ps/ps_worker_impl.h).
PsWorker::PsWorker(std::shared_ptr<Comm> comm, PsGroup group, PsWorkerOptions opt)
    : impl_(std::make_unique<Impl>(std::move(comm), std::move(group), std::move(opt))) {}

PsWorker::~PsWorker() {
  try {
    impl_->shutdown();
  } catch (...) {
    // Destructors never throw; the error was reported by the call that saw it.
  }
}

void PsWorker::start(const ParamLayout& layout, SyncBuffers buffers, const OptimizerConfig& opt) {
  impl_->start(layout, buffers, opt);
}
void PsWorker::begin_step(std::int64_t step, float lr) { impl_->begin_step(step, lr); }
void PsWorker::tensor_ready(std::size_t i) { impl_->tensor_ready(i); }
void PsWorker::wait_params(std::size_t i) { impl_->wait_params(i); }
void PsWorker::flush() { impl_->flush(); }
SyncStepStats PsWorker::take_stats() { return impl_->take_stats(); }
void PsWorker::shutdown() { impl_->shutdown(); }
void PsWorker::abandon(const std::string& why) { impl_->abandon(why); }
void PsWorker::waiting_for_workers(bool on) { impl_->waiting_for_workers(on); }
void PsWorker::working_until(std::chrono::steady_clock::time_point until) {
  impl_->working_until(until);
}
int PsWorker::max_step_skew() const { return impl_->max_step_skew(); }
void PsWorker::save_optimizer_state(std::vector<float>& s1, std::vector<float>& s2) {
  impl_->save_optimizer_state(s1, s2);
}
void PsWorker::load_optimizer_state(const std::vector<float>& s1, const std::vector<float>& s2) {
  impl_->load_optimizer_state(s1, s2);
}
void PsWorker::refresh_params() { impl_->refresh_params(); }
void PsWorker::check_peers() { impl_->check_peers(); }
CommCounters PsWorker::counters() const { return impl_->counters(); }
nlohmann::json PsWorker::server_stats() const { return impl_->server_stats(); }
nlohmann::json PsWorker::local_server_stats() const { return impl_->local_server_stats(); }

PsWorker::Impl::Impl(std::shared_ptr<Comm> comm, PsGroup group, PsWorkerOptions opt)
    : comm_(std::move(comm)), group_(std::move(group)), opt_(std::move(opt)) {
  rank_ = comm_->rank();
  index_ = group_.worker_index(rank_);
  STARRING_CHECK(index_ >= 0, "rank ", rank_, " is not a parameter-server worker");
  STARRING_CONFIG_CHECK(opt_.timeout.count() > 0, "--timeout must be positive");
  STARRING_CONFIG_CHECK(opt_.chunk_bytes >= sizeof(float) && opt_.chunk_bytes <= (1u << 30),
                        "--ps-chunk-bytes must be between 4 bytes and 1 GiB, got ",
                        opt_.chunk_bytes);
  where_ = "rank " + std::to_string(rank_) + " (worker " + std::to_string(index_) + ")";
  PsHeader hb;
  hb.op = Op::kHeartbeat;
  hb.worker = index_;
  heartbeat_msg_ = std::make_unique<std::vector<char>>(make_message(hb, nullptr, 0));
}

Seconds PsWorker::Impl::grace() const {
  return std::clamp(opt_.timeout * 0.5, Seconds(0.5), Seconds(10.0));
}

int PsWorker::Impl::server_rank(int chunk) const {
  return group_.server_ranks[static_cast<std::size_t>(plan_.chunks[chunk].server)];
}

bool PsWorker::Impl::local_chunk(int chunk) const { return link_ && server_rank(chunk) == rank_; }

void PsWorker::Impl::rethrow_if_failed() {
  if (error_) std::rethrow_exception(error_);
}

// Waits (under mu_) until ready() holds or the comm thread reports an error. The comm thread
// enforces the real deadlines; this one is a safety net in case it is itself stuck. It wakes at
// least every 20 ms, so that, as there, this thread's own pauses (common/watch_clock.h) do not
// count.
void PsWorker::Impl::wait_for(const std::function<bool()>& ready, const char* what, bool count_wait,
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

void PsWorker::Impl::wait_chunks(const std::vector<int>& chunks, const char* what) {
  wait_for(
      [&] {
        for (int c : chunks)
          if (completed_[c] != requested_[c]) return false;
        return true;
      },
      what, true);
}

void PsWorker::Impl::begin_step(std::int64_t step, float lr) {
  STARRING_CHECK(started_ && !shut_, where_, ": begin_step outside start()..shutdown()");
  step_ = step;
  lr_ = lr;
  pulse_.mark();
  std::lock_guard<std::mutex> lk(mu_);
  rethrow_if_failed();
}

void PsWorker::Impl::tensor_ready(std::size_t i) {
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

void PsWorker::Impl::wait_params(std::size_t i) {
  STARRING_CHECK(i < plan_.chunks_of_tensor.size(), where_, ": wait_params(", i, ") out of range");
  wait_chunks(opt_.overlap ? plan_.chunks_of_tensor[i] : all_chunks_,
              "updated parameters from the servers");
  pulse_.mark();
}

void PsWorker::Impl::flush() {
  if (!started_) return;
  wait_chunks(all_chunks_, "all outstanding parameters");
}

SyncStepStats PsWorker::Impl::take_stats() {
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

CommCounters PsWorker::Impl::counters() const {
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

}  // namespace starring::ps
