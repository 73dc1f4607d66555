// Trainer: the data-parallel training loop. It owns a model and this worker's data shard (a
// sampler over the caller's Dataset) and drives a GradientSync that the caller owns (the
// registry's Backend, experiments/train_run.cc), never knowing which backend that is (the seam:
// common/gradient_sync.h). The TrainerEnv's references must outlive run().
//
// One optimizer step on a worker:
//   begin_step(step, lr)
//   for each of `accum` micro-batches (this worker's shard, DistributedSampler):
//     forward layer by layer; on the first micro-batch, wait_params(t) for a layer's tensors
//       just before that layer runs (so the previous step's sync overlaps this forward);
//     loss_and_grad with scale 1 / (batch * accum)  -> the gradient of this worker's mean loss;
//     backward layer by layer; on the last micro-batch, tensor_ready(t) as soon as a layer's
//       gradients are final (so the sync overlaps the rest of backward).
// The backend averages over workers, so the update uses the mean over the GLOBAL batch
// (workers * batch * accum samples): the same mathematics as one worker on the whole batch.
//
// Learning rate: lr * scale(W) with scale none | linear (W) | sqrt (sqrt W), reached by linear
// warm-up over warmup_steps from lr (unscaled), optionally cosine-decayed afterwards.
// Evaluation: the test set is sharded round-robin over workers (every sample counted exactly
// once, no drop) and the counts are reduced to worker 0. Every worker evaluates the same
// parameters: after a barrier the sync refreshes them (GradientSync::refresh_params).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/config.h"
#include "common/dataset.h"
#include "common/device.h"
#include "common/gradient_sync.h"
#include "common/trace.h"

namespace starring {

struct EpochRecord {
  int epoch = 0;
  // Worker 0's training seconds since the job's first step (every leg of a resumed job;
  // evaluation and checkpoints not counted). The metrics file's time_s is the same clock.
  double wall_s = 0;
  double train_loss = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  std::int64_t step = 0;  // the optimizer step after which it was evaluated
};

struct TrainResult {
  std::int64_t steps = 0;
  double wall_s = 0;                             // training loop, excluding data loading
  double compute_s = 0, comm_s = 0, wait_s = 0;  // totals on this worker
  std::uint64_t bytes_sent = 0, bytes_recv = 0;  // totals on this worker, over the steps
  std::uint64_t setup_bytes_sent = 0, setup_bytes_recv = 0;            // before the first step
  std::uint64_t checkpoint_bytes_sent = 0, checkpoint_bytes_recv = 0;  // fetching server state
  // The last epoch's; worker 0: the mean over every worker's steps, sent with the evaluation
  // (a run stopped inside an epoch has none: there it is this worker's own partial mean).
  double final_train_loss = 0;
  double test_accuracy = 0, test_loss = 0;  // valid on worker 0
  std::vector<EpochRecord> history;         // valid on worker 0
  std::map<std::string, double> extra;      // backend extras, summed over steps
  std::vector<int> widths;
  std::size_t num_params = 0;
  std::vector<float> params;      // final parameters (host copy), for equivalence checks
  std::string resumed_from;       // the checkpoint this run resumed from (empty: a fresh run)
  std::int64_t resumed_step = 0;  // its step: this run trained steps - resumed_step steps
  // The learning-rate and optimizer settings this run changed from the checkpoint's, as
  // resume_setting_changes (trainer/checkpoint.h) names them; empty: none (or a fresh run).
  std::string resumed_with_changes;
  // The whole job, from the checkpoint a resumed run started from (a fresh run: 1, 0, 0): the
  // runs that trained its steps, this one included (0: unknown, a checkpoint of an older build);
  // the training seconds of the earlier ones over the steps up to resumed_step (each one's
  // slowest worker's, wall_s's clock), also one per earlier run (empty: not recorded, a
  // checkpoint of an older build), and worker 0's over them (the history's clock); and how many
  // leading entries of `history` they evaluated.
  int legs = 1;
  double earlier_train_s = 0;
  std::vector<double> earlier_leg_train_s;
  double earlier_worker0_train_s = 0;
  std::size_t earlier_epochs = 0;
  // Steady state: the totals above without the first `untimed_steps` steps of this run (one-time
  // costs: GPU kernel loading and library set-up, first-touch memory, connections). The first
  // step of a GPU run costs ~90 ms against ~0.3 ms for the next ones (H200, default MLP).
  std::int64_t untimed_steps = 0;
  double timed_wall_s = 0, timed_compute_s = 0, timed_comm_s = 0, timed_wait_s = 0;
  // An output that failed while training went on (the metrics file on a full disk): the caller
  // still writes the summary, then fails the run with this message.
  std::string output_error;
  // The first step whose training loss was not finite on this worker (-1: none): a diverged run,
  // which the caller fails after writing the summary.
  std::int64_t diverged_step = -1;
  // A stop request (SIGUSR1, --fault stop) that the workers agreed on: the step after which they
  // stopped (-1: the run went to its end), the round whose flags decided it, the workers whose
  // request it carried.
  std::int64_t stopped_at_step = -1, stop_round = -1;
  std::vector<int> stop_requested_by;
  // Whether the workers voted on stop requests (--checkpoint-dir, not asp), and whether this
  // worker had one that the vote saw: a request that did not stop the run came after the last
  // vote that could stop it before its end (the caller says so).
  bool stop_vote_on = false, stop_asked = false;
  std::string last_checkpoint;  // worker 0: the newest checkpoint this run wrote
  // Checkpoints this run wrote, and the seconds this worker spent in them (worker 0 gathers and
  // writes, the others wait for it at barriers); like evaluation, outside wall_s and the steps.
  int checkpoints = 0;
  double checkpoint_s = 0;
  // The host's wall clock (unix seconds) when the training loop began its first step: a sweep
  // measures a restart (job start to first step) from it.
  double first_step_unix = 0;
};

struct TrainerEnv {
  Comm& workers;  // worker ranks only, 0..W-1
  GradientSync& sync;
  Device& device;
  Trace* trace = nullptr;  // may be null
};

class Trainer {
 public:
  Trainer(const Config& cfg, TrainerEnv env);
  TrainResult run(const Dataset& train, const Dataset& test);

  // The learning rate at optimizer step `step` (1-based) for `workers` workers.
  static float learning_rate(const TrainConfig& t, std::int64_t step, std::int64_t total_steps,
                             int workers);

 private:
  const Config& cfg_;
  TrainerEnv env_;
};

}  // namespace starring
