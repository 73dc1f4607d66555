// BucketSync: the GradientSync of the all-reduce backends (ring, mpi, nccl), like PyTorch DDP.
//
// Tensors (in backward order) are grouped into buckets of about `bucket_mb`: a bucket is closed
// before a tensor that would make it exceed the cap, and a tensor is never split, so a bucket is
// a contiguous range of the flat buffer (the layout stores tensors in backward order). When the
// last tensor of a bucket reports tensor_ready(), the bucket is queued to a communication thread
// (Open MPI moves data only inside MPI calls, so a thread must be inside them while backward
// runs), which all-reduces it in place (sum, then * 1/W), and - for host buffers - applies the
// shared Optimizer to that slice right away. The backward pass meanwhile produces the next
// buckets, so communication overlaps it. wait_params(i) blocks until the bucket holding tensor i
// is updated. With overlap off, every bucket is queued only when the whole backward is done (at
// the last tensor_ready, or at the first wait_params/flush).
//
// Device buffers (nccl): the thread only all-reduces (on NCCL's stream); scaling and the
// optimizer step run on the trainer thread in wait_params/flush, through the Device, so the
// Device is only ever used from one thread.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "allreduce/allreducer.h"
#include "common/bucketing.h"
#include "common/comm.h"
#include "common/config.h"
#include "common/gradient_sync.h"
#include "common/trace.h"

namespace starring {

class BucketSync : public GradientSync {
 public:
  // `workers`: the engine's Comm (its size W gives the 1/W average, its rank the errors); the
  // bytes reported come from engine->counters(), or its wire_bytes() where it has none.
  BucketSync(std::string name, std::shared_ptr<Comm> workers, std::unique_ptr<Allreducer> engine,
             const SyncConfig& cfg, Trace* trace);
  ~BucketSync() override;

  void start(const ParamLayout& layout, SyncBuffers buffers, const OptimizerConfig& opt) override;
  void begin_step(std::int64_t step, float lr) override;
  void tensor_ready(std::size_t backward_index) override;
  void wait_params(std::size_t backward_index) override;
  void flush() override;
  SyncStepStats take_stats() override;
  void shutdown() override;
  // Checkpoints: every worker holds the whole state (one Optimizer per bucket on the host, or
  // the device arrays); worker 0's copy is returned, every worker's is restored.
  void save_optimizer_state(std::vector<float>& s1, std::vector<float>& s2) override;
  void load_optimizer_state(const std::vector<float>& s1, const std::vector<float>& s2) override;
  bool accepts_device_buffers() const override { return engine_->on_device(); }
  bool can_watch_peers() const override { return engine_->can_watch_peers(); }
  void watch_peers(PeerLiveness* liveness) override;
  std::string name() const override { return name_; }

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  struct Job {
    std::size_t bucket;
    std::int64_t step;
    float lr;
  };
  void submit(std::size_t b);       // queue bucket b for the current step (lock held)
  void submit_pending();            // overlap off: queue every completed bucket
  void wait_bucket(std::size_t b);  // until bucket b's last submitted job is done
  // What wait_bucket counts as progress: the sum of the buckets' finished steps, and the bytes
  // the engine moved (0 for an engine without counters). Lock held.
  using Progress = std::pair<std::int64_t, std::uint64_t>;
  Progress progress() const;
  void apply_on_device(std::size_t b);
  void comm_loop();
  void run_job(const Job& job);

  std::string name_;
  std::shared_ptr<Comm> workers_;
  std::unique_ptr<Allreducer> engine_;
  SyncConfig cfg_;
  Trace* trace_;
  float inv_workers_;
  PeerLiveness* liveness_ = nullptr;  // watch_peers: also asked by wait_bucket past its deadline

  ParamLayout layout_;
  SyncBuffers buf_;
  OptimizerConfig opt_cfg_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // tensor -> bucket
  std::vector<Optimizer> opts_;         // host: one per bucket
  float* dev_s1_ = nullptr;             // device: optimizer state
  float* dev_s2_ = nullptr;

  std::int64_t step_ = 0;
  float lr_ = 0;
  std::vector<std::size_t> ready_;       // tensors ready this step, per bucket
  std::vector<std::size_t> pending_;     // overlap off: complete, not yet queued
  std::vector<Job> last_job_;            // per bucket: the last job queued
  std::vector<std::int64_t> submitted_;  // per bucket: step of the last queued job (-1 none)
  std::vector<std::int64_t> done_;       // per bucket: step of the last finished job
  std::vector<std::int64_t> applied_;    // device: step whose optimizer step was applied

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  bool closed_ = false;  // shutdown() closed the engine (Allreducer::close)
  void stop_thread();
  std::exception_ptr error_;
  std::thread thread_;

  double comm_s_ = 0, wait_s_ = 0;  // since the last take_stats (under mu_)
  double optimizer_s_ = 0;          // host: optimizer time on the communication thread
  // Engines without counters: floats reduced so far and the reference bytes already reported
  // (wire_bytes of the running total, so rounding does not add up over buckets and steps).
  std::uint64_t opaque_floats_ = 0, opaque_reported_ = 0;
  CommCounters last_counters_;
};

}  // namespace starring
