// TrainLoop: the state of one training run on one worker, behind Trainer (trainer.h). Internal to
// trainer/: trainer.cc has the loop (steps, micro-batches, metrics, evaluation),
// train_loop_checkpoint.cc what stops and resumes it (checkpoints, resume, stop requests).
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/clock.h"
#include "trainer/checkpoint.h"
#include "trainer/evaluate.h"
#include "trainer/metrics.h"
#include "trainer/mlp.h"
#include "trainer/peer_watch.h"
#include "trainer/sampler.h"
#include "trainer/staging.h"
#include "trainer/step_losses.h"
#include "trainer/stop_vote.h"
#include "trainer/straggler.h"
#include "trainer/trainer.h"

namespace starring {

// Trainer::run builds one and calls run().
class TrainLoop {
 public:
  TrainLoop(const Config& cfg, TrainerEnv env, const Dataset& train, const Dataset& test);
  ~TrainLoop();
  TrainResult run();

 private:
  void step_once(std::int64_t s, int epoch);
  double micro_batch(std::int64_t s, int m, double* wait_s, double* grad_sq);
  void record_step(int epoch, float lr, double loss, double step_s, double wait_s, double grad_sq);
  void evaluate(int epoch);
  // Of the workers, after start(): a timeout checks the backend's peers first. Under asp/ssp
  // the wait for a slower worker goes on while it trains (peer_watch_); `what`: for its error.
  void barrier(const std::string& what = "a barrier of the workers");
  // Under asp/ssp, the wait for every worker's arrival at `what` (peer_watch_), heartbeating the
  // backend's peers meanwhile; nothing otherwise. barrier() begins with it.
  void meet(const std::string& what);
  void add_sync_stats(const SyncStepStats& st);
  // sync.flush(), the wait for the last step's communication (before an evaluation, a
  // checkpoint, the end), traced as "wait_flush" on the compute row; returns its seconds.
  double wait_flush();
  void resume();
  void end_resumed_with_nothing_left();
  void resume_lr_scale(const CheckpointData& c);
  void advance_position(std::int64_t s, int epoch);
  void maybe_checkpoint(bool after_eval);
  void checkpoint();
  bool stop_now();
  void stop();
  double samples_per_step() const { return static_cast<double>(tc_.batch) * tc_.accum * world_; }

  const Config& cfg_;
  const TrainConfig& tc_;
  TrainerEnv env_;
  const Dataset& train_;
  const Dataset& test_;
  const int rank_, world_;
  Trace* trace_;
  Mlp model_;
  ResumePoint resume_;  // read (and its parameters set) before staging_ copies them
  DistributedSampler sampler_;
  std::int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  int epochs_ = 0;
  // The workers --lr-scale scales the rate for: this run's, or a resumed checkpoint's (the global
  // batch is the same, so the schedule must be too when the workers changed with it).
  int lr_workers_ = 0;
  Staging staging_;
  Straggler straggler_;
  FaultInjector fault_;
  StopVote stop_vote_;
  bool stopping_ = false;
  std::vector<std::vector<std::size_t>> layer_t_;  // backward-order tensors of each layer, sorted
  std::vector<float> xb_;
  std::vector<int> yb_;
  float* dx_ = nullptr;
  int* dy_ = nullptr;
  MetricsWriter metrics_;
  StepLosses step_losses_;  // writes worker 0's step lines (after metrics_)
  Progress progress_;
  Evaluator evaluator_;
  TrainResult res_;
  std::int64_t step_ = 0;
  double loss_acc_ = 0, epoch_loss_ = 0, eval_s_ = 0;
  // The metrics line's span begins at the previous line's time_s; waits for the backend between
  // steps (before an evaluation or a checkpoint) go into the next line's wait_s.
  double last_line_s_ = 0, wait_between_s_ = 0;
  int loss_n_ = 0, epoch_batches_ = 0;
  Clock::time_point t_start_;
  // The totals when the untimed steps were done (wall, compute, comm, wait), see TrainResult.
  std::int64_t untimed_ = 0;
  double mark_[4] = {0, 0, 0, 0};
  // Checkpoints: where the next step is (epoch, optimizer step within it), the first one of this
  // run, and the step of the last checkpoint written (-1: none).
  int pos_epoch_ = 0;
  std::int64_t pos_batch_ = 0, start_batch_ = 0, last_ckpt_step_ = -1;
  // Last: its thread stops first. On where workers may drift apart (asp, ssp).
  PeerWatch peer_watch_;
};

}  // namespace starring
