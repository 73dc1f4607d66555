#include "allreduce/bucket_sync.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "common/census.h"
#include "common/clock.h"
#include "common/comm_util.h"
#include "common/device.h"
#include "common/error.h"

namespace starring {

BucketSync::BucketSync(std::string name, std::shared_ptr<Comm> workers,
                       std::unique_ptr<Allreducer> engine, const SyncConfig& cfg, Trace* trace)
    : name_(std::move(name)),
      workers_(std::move(workers)),
      engine_(std::move(engine)),
      cfg_(cfg),
      trace_(trace),
      inv_workers_(1.0f / static_cast<float>(workers_->size())) {
  STARRING_CONFIG_CHECK(cfg_.bucket_mb > 0, "--bucket-mb must be positive, got ", cfg_.bucket_mb);
}

BucketSync::~BucketSync() {
  stop_thread();  // not shutdown(): the engine's close may throw; its destructor releases it
  if (buf_.device) {
    if (dev_s1_) buf_.device->free(dev_s1_);
    if (dev_s2_) buf_.device->free(dev_s2_);
  }
}

void BucketSync::start(const ParamLayout& layout, SyncBuffers buffers, const OptimizerConfig& opt) {
  STARRING_CHECK(buffers.on_device == engine_->on_device(), workers_->where(), ": backend '", name_,
                 "' needs ", engine_->on_device() ? "device" : "host", " buffers");
  layout_ = layout;
  buf_ = buffers;
  opt_cfg_ = opt;
  buckets_ = make_buckets(layout, cfg_.bucket_mb * 1024.0 * 1024.0);
  bucket_of_ = bucket_of_tensor(buckets_, layout.num_tensors());
  for (const Bucket& b : buckets_) {
    STARRING_CHECK(b.contiguous(), "bucket of tensors ", b.first_tensor, "..", b.end_tensor - 1,
                   " is not contiguous in the flat buffer (a bucket's tensors, consecutive in "
                   "backward order, must together fill one span of it: one all-reduce each)");
    if (!buf_.on_device) opts_.emplace_back(opt, b.lo, b.hi);
  }
  if (buf_.on_device) {
    dev_s1_ = buf_.device->alloc(layout.total());
    dev_s2_ = buf_.device->alloc(layout.total());
  }
  const std::size_t nb = buckets_.size();
  ready_.assign(nb, 0);
  last_job_.assign(nb, Job{0, 0, 0});
  submitted_.assign(nb, -1);
  done_.assign(nb, -1);
  applied_.assign(nb, -1);
  if (auto c = engine_->counters()) last_counters_ = *c;
  thread_ = std::thread([this] { comm_loop(); });
}

void BucketSync::watch_peers(PeerLiveness* liveness) {
  std::lock_guard<std::mutex> lk(mu_);
  liveness_ = can_watch_peers() ? liveness : nullptr;
  engine_->watch_peers(liveness_);
}

void BucketSync::begin_step(std::int64_t step, float lr) {
  std::lock_guard<std::mutex> lk(mu_);
  step_ = step;
  lr_ = lr;
}

void BucketSync::submit(std::size_t b) {
  Job job{b, step_, lr_};
  last_job_[b] = job;
  submitted_[b] = step_;
  queue_.push_back(job);
  cv_.notify_all();
}

void BucketSync::submit_pending() {
  for (std::size_t b : pending_) submit(b);
  pending_.clear();
}

void BucketSync::tensor_ready(std::size_t i) {
  const std::size_t b = bucket_of_.at(i);
  const Bucket& bk = buckets_[b];
  std::unique_lock<std::mutex> lk(mu_);
  if (++ready_[b] < bk.end_tensor - bk.first_tensor) return;
  ready_[b] = 0;
  // Device buffers: the gradients were produced by queued kernels; NCCL runs on another stream.
  if (buf_.on_device) buf_.device->synchronize();
  if (cfg_.overlap) {
    submit(b);
  } else {
    pending_.push_back(b);
    if (pending_.size() == buckets_.size()) submit_pending();
  }
}

void BucketSync::wait_bucket(std::size_t b) {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  if (!pending_.empty()) submit_pending();
  const auto timeout = std::chrono::duration<double>(cfg_.timeout_s);
  Progress seen{-2, 0};
  auto last_progress = Clock::now();
  while (done_[b] < submitted_[b] && !error_) {
    // The deadline restarts whenever any bucket finishes (the queue ahead may be long) or the
    // engine moves data (one bucket's all-reduce may take longer than the timeout: its own waits
    // time out where a peer goes silent).
    if (const Progress now = progress(); now != seen) {
      seen = now;
      last_progress = Clock::now();
    }
    auto deadline = last_progress + std::chrono::duration_cast<Clock::duration>(timeout);
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && done_[b] < submitted_[b] &&
        !error_ && Clock::now() >= deadline) {
      if (progress() != seen) continue;  // data moved meanwhile
      // A peer is alive (a straggler's long step): the communication thread's wait goes on too,
      // and it names a peer that stops. Asked again a timeout later.
      std::string why;
      if (liveness_ && liveness_->peers_alive(&why)) {
        last_progress = Clock::now();
        continue;
      }
      // The communication thread's own wait started later (when the bucket's job did) and its
      // error names the peer that went silent: give it a moment to say so before ours, which
      // can only name this rank. Its census (allreduce/progress_waiter.h) listens for a
      // census_grace after its own timeout: at --timeout 1.5 s or less that grace was all ours,
      // and ours came first (np 3 ring, --timeout 1, --fault hang:2:5, --straggler 1:700: 'rank
      // 1: timeout ... waiting for gradient bucket 0' in 12 of 13 runs, not the census naming 2).
      const auto grace = std::chrono::duration_cast<Clock::duration>(
          std::min(timeout, std::chrono::duration<double>(5.0)) + census_grace(Seconds(timeout)));
      if (cv_.wait_until(lk, deadline + grace, [&] { return error_ || done_[b] >= submitted_[b]; }))
        continue;
      throw TimeoutError(timeout_message(*workers_, Seconds(cfg_.timeout_s),
                                         "waiting for gradient bucket " + std::to_string(b) +
                                             " (step " + std::to_string(submitted_[b]) +
                                             ") of backend '" + name_ + "'"));
    }
  }
  if (error_) std::rethrow_exception(error_);
  lk.unlock();
  if (buf_.on_device) apply_on_device(b);
  std::lock_guard<std::mutex> lk2(mu_);
  wait_s_ += seconds_since(t0);
}

BucketSync::Progress BucketSync::progress() const {
  std::int64_t finished = 0;
  for (auto d : done_) finished += d;
  std::uint64_t moved = 0;
  if (auto c = engine_->counters()) moved = c->bytes_sent + c->bytes_recv;
  return {finished, moved};
}

void BucketSync::apply_on_device(std::size_t b) {
  const Job job = last_job_[b];
  if (applied_[b] >= job.step || submitted_[b] < 0) return;
  const Bucket& bk = buckets_[b];
  const std::size_t n = bk.hi - bk.lo;
  buf_.device->scale(buf_.grads + bk.lo, inv_workers_, n);
  buf_.device->optimizer_step(opt_cfg_, buf_.params + bk.lo, buf_.grads + bk.lo, dev_s1_ + bk.lo,
                              dev_s2_ + bk.lo, n, job.lr, job.step);
  applied_[b] = job.step;
}

void BucketSync::wait_params(std::size_t i) { wait_bucket(bucket_of_.at(i)); }

void BucketSync::flush() {
  for (std::size_t b = 0; b < buckets_.size(); ++b) wait_bucket(b);
}

void BucketSync::save_optimizer_state(std::vector<float>& s1, std::vector<float>& s2) {
  const std::size_t n = layout_.total();
  const bool adamw = opt_cfg_.type == "adamw";
  s1.assign(n, 0.0f);
  s2.assign(adamw ? n : 0, 0.0f);
  if (buf_.on_device) {
    buf_.device->synchronize();
    buf_.device->to_host(s1.data(), dev_s1_, n);
    if (adamw) buf_.device->to_host(s2.data(), dev_s2_, n);
    return;
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Optimizer& o = opts_[b];
    std::copy(o.state1().begin(), o.state1().end(), s1.begin() + o.begin());
    std::copy(o.state2().begin(), o.state2().end(), s2.begin() + (adamw ? o.begin() : 0));
  }
}

void BucketSync::load_optimizer_state(const std::vector<float>& s1, const std::vector<float>& s2) {
  const std::size_t n = layout_.total();
  const bool adamw = opt_cfg_.type == "adamw";
  STARRING_CHECK(s1.size() == n && s2.size() == (adamw ? n : 0), workers_->where(),
                 ": optimizer state of ", s1.size(), " + ", s2.size(), " floats for a model of ", n,
                 " parameters (", opt_cfg_.type, ")");
  if (buf_.on_device) {
    buf_.device->to_device(dev_s1_, s1.data(), n);
    if (adamw) buf_.device->to_device(dev_s2_, s2.data(), n);
    return;
  }
  std::lock_guard<std::mutex> lk(mu_);  // the communication thread is idle: nothing queued yet
  for (Optimizer& o : opts_) {
    std::copy(s1.begin() + o.begin(), s1.begin() + o.end(), o.state1().begin());
    if (adamw) std::copy(s2.begin() + o.begin(), s2.begin() + o.end(), o.state2().begin());
  }
}

void BucketSync::run_job(const Job& job) {
  const Bucket& bk = buckets_[job.bucket];
  const std::size_t n = bk.hi - bk.lo;
  const double t0 = trace_ ? trace_->now_us() : 0;
  const auto c0 = Clock::now();
  float* g = buf_.grads + bk.lo;
  // Device buffers are scaled with the optimizer step on the trainer thread.
  engine_->run(g, g, n, buf_.on_device ? 1.0f : inv_workers_);
  const double comm = seconds_since(c0);
  double opt = 0;
  if (!buf_.on_device) {
    const auto o0 = Clock::now();
    opts_[job.bucket].apply(buf_.params, buf_.grads, bk.lo, bk.hi, job.lr, job.step);
    opt = seconds_since(o0);
  }
  if (trace_) {
    trace_->complete("allreduce bucket " + std::to_string(job.bucket), "comm", t0, comm * 1e6,
                     {{"bytes", static_cast<double>(n * sizeof(float))},
                      {"step", static_cast<double>(job.step)}});
    if (!buf_.on_device)
      trace_->complete("optimizer bucket " + std::to_string(job.bucket), "comm", t0 + comm * 1e6,
                       opt * 1e6);
  }
  std::lock_guard<std::mutex> lk(mu_);
  comm_s_ += comm;
  optimizer_s_ += opt;
  if (!engine_->counters()) opaque_floats_ += n;
  done_[job.bucket] = job.step;
  cv_.notify_all();
}

void BucketSync::comm_loop() {
  if (trace_) trace_->set_thread_name("comm");
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      // Idle wait for work (not a wait on a peer): woken by submit() or shutdown().
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty()) return;
      job = queue_.front();
      queue_.pop_front();
    }
    try {
      run_job(job);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = std::current_exception();
      queue_.clear();
      cv_.notify_all();
      return;
    }
  }
}

SyncStepStats BucketSync::take_stats() {
  SyncStepStats st;
  std::lock_guard<std::mutex> lk(mu_);
  st.comm_s = comm_s_;
  st.wait_s = wait_s_;
  st.extra["optimizer_s"] = optimizer_s_;  // host: applied on the communication thread
  comm_s_ = wait_s_ = optimizer_s_ = 0;
  if (auto c = engine_->counters()) {
    st.bytes_sent = c->bytes_sent - last_counters_.bytes_sent;
    st.bytes_recv = c->bytes_recv - last_counters_.bytes_recv;
    last_counters_ = *c;
  } else {
    const std::uint64_t total = engine_->wire_bytes(opaque_floats_);
    st.bytes_sent = st.bytes_recv = total - opaque_reported_;
    st.extra["bytes_are_reference"] = 1;
    opaque_reported_ = total;
  }
  return st;
}

// The run is over on this rank: the sync thread ends, then the engine releases what it shares
// with its peers, bounded by the timeout (a peer stopped after its last step is named).
void BucketSync::shutdown() {
  stop_thread();
  if (closed_) return;
  closed_ = true;
  // Called while an exception is handled (Trainer::run's failure path): the engine gives up at
  // once. Its destructor would wait for peers that may be the silent ones (120 s: a rank that
  // timed out in the evaluation waited that long here before reporting it).
  engine_->close(std::current_exception() != nullptr);
}

void BucketSync::stop_thread() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace starring
