// TrainLoop's checkpoints, resume and stop requests (train_loop.h).
#include <algorithm>
#include <cstdio>
#include <string>

#include "common/fault.h"
#include "trainer/train_loop.h"

namespace starring {

// Continue where the checkpoint stopped: the step (so the learning-rate schedule and Adam's bias
// correction continue), the sampler's epoch and the optimizer steps already done in it, the
// epoch's loss so far, and the metrics lines written up to that step.
void TrainLoop::resume() {
  const CheckpointData& c = resume_.data;
  step_ = last_ckpt_step_ = res_.resumed_step = c.step;
  res_.resumed_from = resume_.path;
  pos_epoch_ = c.epoch;
  start_batch_ = c.next_batch;
  epoch_loss_ = c.epoch_loss_sum;
  epoch_batches_ = static_cast<int>(c.epoch_steps);
  if (start_batch_ >= steps_per_epoch_) start_batch_ = 0, ++pos_epoch_;
  // The job so far, for the summary: the earlier runs' epochs and training time.
  res_.legs = c.legs > 0 ? c.legs + 1 : 0;
  res_.earlier_train_s = c.train_s;
  // One figure per earlier run, or none when the file did not record them all.
  if (c.legs > 0 && c.leg_train_s.size() == static_cast<std::size_t>(c.legs))
    res_.earlier_leg_train_s = c.leg_train_s;
  res_.earlier_worker0_train_s = c.worker0_train_s;
  res_.history = c.history;
  res_.earlier_epochs = c.history.size();
  pos_batch_ = start_batch_;
  resume_lr_scale(c);
  // time_s goes on from worker 0's training seconds in the earlier runs, the history's clock (a
  // file of an older build, whose step lines counted evaluation: from the last of its lines)
  metrics_.write_earlier(resume_.metrics_lines, c.worker0_train_s);
  metrics_.flush();  // a crashed earlier run had them only in the .partial file just replaced
  progress_.resume_at(step_);
  // Also in the summary (printed and in its JSON): under --progress off this note was the only
  // word of a changed rate, and it was not shown.
  res_.resumed_with_changes = resume_setting_changes(c, cfg_, total_steps_);
  if (rank_ == 0) {
    progress_.message("resuming from " + resume_.path + " at step " + std::to_string(step_) +
                      " (epoch " + std::to_string(pos_epoch_ + 1) + ", " +
                      std::to_string(start_batch_) + " of its steps done)");
    if (!res_.resumed_with_changes.empty())
      progress_.message(
          "resuming with other settings than the checkpoint's run: " + res_.resumed_with_changes +
          "; they apply from step " + std::to_string(step_ + 1));
  }
}

// Resumed with nothing left (no epoch evaluated by this run): report the earlier run's
// evaluation of these parameters, or evaluate them (a checkpoint taken between evaluations, or
// of an older build, which carries no history).
void TrainLoop::end_resumed_with_nothing_left() {
  if (!res_.history.empty() && res_.history.back().step == step_) {
    const EpochRecord& e = res_.history.back();
    res_.final_train_loss = e.train_loss;
    res_.test_accuracy = e.test_accuracy;
    res_.test_loss = e.test_loss;
  } else {  // the epoch in progress, or the one that just ended
    evaluate(pos_batch_ != 0 ? pos_epoch_ : std::max(pos_epoch_ - 1, 0));
  }
}

// --lr-scale scales the rate with the workers because the global batch grows with them; a resume
// keeps the global batch, so on other workers (2 x 64 as 1 x 128) it keeps the checkpoint's
// basis: with this run's, the rate halved there, mid-schedule. Files without lr_workers (older
// builds) give the workers that wrote them.
void TrainLoop::resume_lr_scale(const CheckpointData& c) {
  const nlohmann::json& m = c.meta;
  const auto basis =
      m.contains("lr_workers") ? m["lr_workers"] : m.value("workers", nlohmann::json());
  if (basis.is_number_integer() && basis.get<int>() > 0) lr_workers_ = basis.get<int>();
  if (rank_ == 0 && lr_workers_ != world_ && tc_.lr_scale != "none")
    progress_.message("--lr-scale " + tc_.lr_scale + ": the rate stays scaled for " +
                      std::to_string(lr_workers_) + " workers, as in the checkpoint (" +
                      std::to_string(world_) + " here, on the same global batch)");
}

void TrainLoop::advance_position(std::int64_t s, int epoch) {
  const bool epoch_done = s + 1 == steps_per_epoch_;
  pos_epoch_ = epoch_done ? epoch + 1 : epoch;
  pos_batch_ = epoch_done ? 0 : s + 1;
}

// --checkpoint-every N: after every N-th step, and after the last one. A checkpoint at the end
// of an epoch or of the run is taken after its evaluation, so a resumed run does not repeat it.
void TrainLoop::maybe_checkpoint(bool after_eval) {
  const CheckpointConfig& k = cfg_.ckpt;
  if (k.dir.empty() || last_ckpt_step_ == step_) return;
  const bool last = step_ >= total_steps_;
  if (!last && !(k.every > 0 && step_ % k.every == 0)) return;
  if (!after_eval && (pos_batch_ == 0 || last)) return;
  checkpoint();
}

// After every step: this worker's stop request (SIGUSR1, --fault stop) goes into the vote; true
// when the workers agreed to stop now, before the run's last step (at the last step the run ends
// as planned, with its evaluation and checkpoint).
bool TrainLoop::stop_now() {
  const bool mine = stop_requested() || fault_.stop_requested(rank_, step_);
  return stop_vote_.after_step(step_, mine) && step_ < total_steps_;
}

// The workers agreed to stop after this step: a checkpoint of it (unless one was just written),
// no evaluation - a preemption notice leaves little time.
void TrainLoop::stop() {
  res_.stopped_at_step = step_;
  res_.stop_round = stop_vote_.decided_round();
  res_.stop_requested_by = stop_vote_.requested_by();
  if (last_ckpt_step_ != step_) checkpoint();
  if (rank_ == 0)
    progress_.message("stopped after step " + std::to_string(step_) + " of " +
                      std::to_string(total_steps_) + " on a stop request");
}

// Every worker flushes; a barrier makes sure every worker's last pushes have landed (asp/ssp);
// the backend gathers the optimizer state to worker 0, which writes the file and then tells the
// others whether that worked. Its time counts, like evaluation, outside the training time; the
// flush does not: as before an evaluation, waiting for the last step's communication is the
// training's (under bsp a fast worker 0 waits there for a straggler's gradients, which the
// straggler's own clock counts: taken out, worker 0's timeline fell behind the totals by about a
// step's wait per checkpoint, 0.02 s against 0.20 s with a checkpoint every step).
void TrainLoop::checkpoint() {
  const double flush_s = wait_flush();
  res_.wait_s += flush_s;
  wait_between_s_ += flush_s;  // the next step line's
  const auto t0 = Clock::now();
  TraceScope tc(trace_, "checkpoint", "checkpoint");
  const std::string at = detail::concat("the checkpoint at step ", step_);
  // The last step's traffic is whole once every worker has flushed (a co-located shard may still
  // be answering the others' pulls): read between barriers, before any checkpoint message.
  barrier(at);
  add_sync_stats(env_.sync.take_stats());
  step_losses_.drain();  // the step lines before the checkpoint's (a resumed run keeps them)
  barrier(at);
  CheckpointData c;
  // The epoch's training loss so far, as the mean worker's sum: a resumed run (on any number of
  // workers) starts every worker from it, and its epoch mean stays the global batch's. And each
  // worker's training seconds in this run up to this step, in a slot of its own: the job's
  // train_s takes the slowest worker's, as the summary's wall_s does (under asp/ssp a fast worker
  // 0 reaches the checkpoint's barrier long before a straggler), the history's clock worker 0's.
  const double mine_s = std::chrono::duration<double>(t0 - t_start_).count() - eval_s_;
  std::vector<double> sums(1 + world_, 0.0);
  sums[0] = epoch_loss_;
  sums[1 + rank_] = mine_s;
  sums = sum_to_worker0(env_.workers, std::move(sums), tags::kCheckpointSums);
  const double loss_sum = sums[0];
  const double leg_s = *std::max_element(sums.begin() + 1, sums.end());
  env_.sync.save_optimizer_state(c.state1, c.state2);
  std::string path, error;
  if (rank_ == 0) {
    try {
      staging_.all_params_up();
      c.params.resize(model_.num_params());
      env_.device.to_host(c.params.data(), model_.params(), c.params.size());
      c.meta = checkpoint_meta(cfg_, model_.widths(), model_.num_params(), env_.sync.name(), world_,
                               train_.n);
      c.meta["lr_workers"] = lr_workers_;
      c.meta["lr"]["schedule_steps"] = total_steps_;  // the cosine's length (--epochs, --max-steps)
      c.step = step_;
      c.epoch = pos_epoch_;
      c.next_batch = pos_batch_;
      // At an epoch's end, the finished epoch's (reported by a resumed run with no steps left).
      c.epoch_loss_sum = loss_sum / world_;
      c.epoch_steps = epoch_batches_;
      c.legs = res_.legs;  // 0 stays unknown: the earlier runs' part is missing
      c.train_s = res_.earlier_train_s + leg_s;
      // one figure per run, when every earlier run's is known
      if (res_.earlier_leg_train_s.size() + 1 == static_cast<std::size_t>(res_.legs)) {
        c.leg_train_s = res_.earlier_leg_train_s;
        c.leg_train_s.push_back(leg_s);
      }
      c.worker0_train_s = res_.earlier_worker0_train_s + mine_s;
      c.history = res_.history;
      test_stop_point("checkpoint-write", rank_);
      path = save_checkpoint(cfg_.ckpt, c, env_.workers.where());
      res_.last_checkpoint = path;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree_with_worker0(env_.workers, error, "the checkpoint of step " + std::to_string(step_));
  if (!error.empty()) throw Error(error);
  // The servers' state is the checkpoint's traffic: read after worker 0 has it all (its verdict
  // comes after), and before any worker goes on (a co-located shard would count its pushes).
  const SyncStepStats ck = env_.sync.take_stats();
  res_.checkpoint_bytes_sent += ck.bytes_sent;
  res_.checkpoint_bytes_recv += ck.bytes_recv;
  barrier(at);
  last_ckpt_step_ = step_;
  const double took_s = seconds_since(t0);
  ++res_.checkpoints;
  res_.checkpoint_s += took_s;
  eval_s_ += took_s;
  if (rank_ != 0) return;
  metrics_.write({{"event", "checkpoint"},
                  {"step", step_},
                  {"path", path},
                  {"save_s", took_s},
                  {"time_s", mine_s}});  // worker 0's training seconds at the checkpoint
  metrics_.flush();
  progress_.message("checkpoint: step " + std::to_string(step_) + " -> " + path);
}

}  // namespace starring
