#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <thread>

#include "common/comm_util.h"
#include "common/error.h"
#include "trainer/train_loop.h"

namespace starring {

Trainer::Trainer(const Config& cfg, TrainerEnv env) : cfg_(cfg), env_(env) {}

namespace {

std::vector<int> model_widths(const Config& cfg, const Dataset& train) {
  std::vector<int> w{train.dim};
  w.insert(w.end(), cfg.model.hidden.begin(), cfg.model.hidden.end());
  w.push_back(train.classes);
  return w;
}

int eval_batch(const TrainConfig& tc) { return std::max(tc.batch, 256); }

// --resume: every worker gets the checkpoint, and the model its parameters (before the sync
// starts, so parameter servers receive them as the initial parameters).
ResumePoint resume_into(const Config& cfg, Comm& workers, Mlp& model, std::int64_t train_samples) {
  ResumePoint r = resume_point(cfg, workers, model.widths(), model.num_params(), train_samples);
  if (!r.path.empty())
    model.device().to_device(model.params(), r.data.params.data(), r.data.params.size());
  return r;
}

}  // namespace

TrainLoop::TrainLoop(const Config& cfg, TrainerEnv env, const Dataset& train, const Dataset& test)
    : cfg_(cfg),
      tc_(cfg.train),
      env_(env),
      train_(train),
      test_(test),
      rank_(env.workers.rank()),
      world_(env.workers.size()),
      trace_(env.trace),
      model_(env.device, model_widths(cfg, train), eval_batch(cfg.train), cfg.train.seed),
      resume_(resume_into(cfg, env.workers, model_, train.n)),
      sampler_(train.n, rank_, world_, cfg.train.batch, cfg.train.seed),
      staging_(model_, env.device.is_gpu() && !env.sync.accepts_device_buffers()),
      straggler_(cfg.train.straggler, cfg.train.seed, world_),
      fault_(cfg.train.fault),
      stop_vote_(env.workers,
                 StopVote::lag_for_run(!cfg.ckpt.dir.empty(), env.sync.max_step_skew()),
                 kStopVoteEvery, StopVote::off_reason_for_run(!cfg.ckpt.dir.empty())),
      metrics_(rank_ == 0 ? cfg.out.metrics_file : ""),
      step_losses_(env.workers, metrics_,
                   !cfg.out.metrics_file.empty() && cfg.out.metrics_loss == "all",
                   lag_for_skew(env.sync.max_step_skew())),
      progress_(cfg.out.progress, 0, cfg.out.log_every, false),
      evaluator_(model_, env.workers, eval_batch(cfg.train)),
      // asp/ssp: workers far apart meet; ring/mpi: their waits in the collective ask it whether
      // a slower peer is alive (trainer/peer_watch.h).
      peer_watch_(env.workers, env.sync.max_step_skew() != 0 || env.sync.can_watch_peers()) {
  steps_per_epoch_ = static_cast<std::int64_t>(sampler_.batches_per_epoch()) / tc_.accum;
  STARRING_CONFIG_CHECK(steps_per_epoch_ > 0, "batch ", tc_.batch, " x accum ", tc_.accum,
                        " is larger than this worker's shard (", train.n / world_, " of ", train.n,
                        " samples over ", world_, " workers)");
  total_steps_ = steps_per_epoch_ * tc_.epochs;
  if (tc_.max_steps >= 0) total_steps_ = std::min(total_steps_, tc_.max_steps);
  epochs_ = static_cast<int>((total_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_);
  progress_ = Progress(cfg.out.progress, total_steps_, cfg.out.log_every, rank_ == 0);
  lr_workers_ = world_;
  for (int l = 0; l < model_.num_layers(); ++l) {
    layer_t_.push_back(model_.layer_tensors(l));
    std::sort(layer_t_.back().begin(), layer_t_.back().end());
  }
  xb_.resize(static_cast<std::size_t>(tc_.batch) * train.dim);
  yb_.resize(tc_.batch);
  dx_ = env_.device.alloc(xb_.size());
  dy_ = env_.device.alloc_int(yb_.size());
  res_.widths = model_.widths();
  res_.num_params = model_.num_params();
  if (!resume_.path.empty()) resume();
}

TrainLoop::~TrainLoop() {
  // Its communication thread is idle or joined by now (run() flushed, or Trainer::run shut the
  // backend down): nothing asks the PeerWatch that goes with this loop.
  if (env_.sync.can_watch_peers()) env_.sync.watch_peers(nullptr);
  env_.device.free(dx_);
  env_.device.free_int(dy_);
}

TrainResult TrainLoop::run() {
  if (trace_) trace_->set_thread_name("compute");
  // Before the backend's threads start; taken back by the destructor.
  if (peer_watch_.enabled() && env_.sync.can_watch_peers()) env_.sync.watch_peers(&peer_watch_);
  env_.sync.start(model_.layout(), staging_.buffers(), tc_.opt);
  if (!resume_.path.empty()) {
    env_.sync.load_optimizer_state(resume_.data.state1, resume_.data.state2);
    resume_.data = CheckpointData{};  // every server has its state at the barrier below
  }
  // Traffic before the first step is the backend's set-up (a parameter server's start message and
  // initial parameters, a restored checkpoint's state), not per-step traffic: kept apart, read
  // between barriers (before: every worker started, so a co-located shard's acks are counted;
  // after: no worker's first push reaches a co-located shard before its worker has read).
  barrier("the start of training");
  const SyncStepStats setup = env_.sync.take_stats();
  res_.setup_bytes_sent = setup.bytes_sent;
  res_.setup_bytes_recv = setup.bytes_recv;
  barrier("the start of training");
  t_start_ = Clock::now();
  res_.first_step_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  untimed_ = std::clamp<std::int64_t>((total_steps_ - res_.resumed_step) / 4, 0, tc_.untimed_steps);
  const int first_epoch = pos_epoch_;
  for (int epoch = first_epoch; epoch < epochs_ && step_ < total_steps_ && !stopping_; ++epoch) {
    sampler_.set_epoch(epoch);
    if (epoch != first_epoch || start_batch_ == 0) epoch_loss_ = epoch_batches_ = 0;
    for (std::int64_t s = epoch == first_epoch ? start_batch_ : 0;
         s < steps_per_epoch_ && step_ < total_steps_ && !stopping_; ++s) {
      step_once(s, epoch);
      advance_position(s, epoch);
      maybe_checkpoint(false);
      stopping_ = stop_now();
    }
    res_.final_train_loss = epoch_loss_ / std::max(epoch_batches_, 1);
    if (stopping_ && pos_batch_ != 0) break;  // stopped inside the epoch
    // A stop at an epoch's end evaluates it first, as a checkpoint there does: the resumed run
    // starts the next epoch and would never evaluate this one.
    if (tc_.eval_each_epoch || epoch + 1 == epochs_ || step_ >= total_steps_) evaluate(epoch);
    maybe_checkpoint(true);
  }
  if (stopping_) stop();
  stop_vote_.finish();
  res_.stop_vote_on = stop_vote_.enabled();
  res_.stop_asked = stop_vote_.asked();
  if (res_.history.size() == res_.earlier_epochs && !stopping_) end_resumed_with_nothing_left();
  res_.wait_s += wait_flush();
  add_sync_stats(env_.sync.take_stats());  // traffic that completed in the final flush
  // Before the host copy of the parameters below (for the tests' comparisons): 80 MB of the
  // wide model's took tens of ms, counted in wall_s and so in step_time.total_s, which read
  // about 3% above compute + wait on a 2048-wide model's 30-step run.
  res_.wall_s = seconds_since(t_start_) - eval_s_;
  staging_.all_params_up();
  res_.params.resize(model_.num_params());
  env_.device.to_host(res_.params.data(), model_.params(), res_.params.size());
  progress_.done();
  res_.steps = step_;
  if (step_ - res_.resumed_step <= untimed_) untimed_ = 0;  // stopped early: time every step
  res_.untimed_steps = untimed_;
  res_.timed_wall_s = res_.wall_s - (untimed_ ? mark_[0] : 0);
  res_.timed_compute_s = res_.compute_s - (untimed_ ? mark_[1] : 0);
  res_.timed_comm_s = res_.comm_s - (untimed_ ? mark_[2] : 0);
  res_.timed_wait_s = res_.wait_s - (untimed_ ? mark_[3] : 0);
  step_losses_.drain();  // lines a run without a last evaluation still holds
  try {
    if (stopping_)
      metrics_.keep_partial();  // the run goes on when resumed: its lines stay in the .partial
    else
      metrics_.finish();
  } catch (const Error& e) {
    res_.output_error = e.what();
  }
  return res_;
}

void TrainLoop::step_once(std::int64_t s, int epoch) {
  ++step_;
  const auto t_step = Clock::now();
  const float lr = Trainer::learning_rate(tc_, step_, total_steps_, lr_workers_);
  peer_watch_.begin_step();
  env_.sync.begin_step(step_, lr);
  fault_.at_step(rank_, step_);
  double loss = 0, wait_s = 0, grad_sq = 0;
  for (int m = 0; m < tc_.accum; ++m) loss += micro_batch(s, m, &wait_s, &grad_sq) / tc_.accum;
  record_step(epoch, lr, loss, seconds_since(t_step), wait_s, grad_sq);
  if (untimed_ > 0 && step_ - res_.resumed_step == untimed_) {
    mark_[0] = seconds_since(t_start_) - eval_s_;
    mark_[1] = res_.compute_s;
    mark_[2] = res_.comm_s;
    mark_[3] = res_.wait_s;
  }
}

// One micro-batch: forward (waiting for each layer's parameters on the first micro-batch),
// loss, backward (handing each layer's gradients to the sync on the last micro-batch).
double TrainLoop::micro_batch(std::int64_t s, int m, double* wait_s, double* grad_sq) {
  const ParamLayout& layout = model_.layout();
  auto idx = sampler_.batch(static_cast<std::size_t>(s) * tc_.accum + m);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    std::copy_n(train_.x.data() + idx[i] * train_.dim, train_.dim, xb_.data() + i * train_.dim);
    yb_[i] = train_.y[idx[i]];
  }
  env_.device.to_device(dx_, xb_.data(), xb_.size());
  env_.device.to_device_int(dy_, yb_.data(), yb_.size());
  model_.set_input(dx_, tc_.batch);
  const int L = model_.num_layers();
  {
    TraceScope tf(trace_, "forward", "compute");
    for (int l = 0; l < L; ++l) {
      if (m == 0) {
        const auto t_wait = Clock::now();
        TraceScope tw(trace_, "wait_params", "wait");
        for (auto t : layer_t_[l]) {
          env_.sync.wait_params(t);
          staging_.params_up(layout.tensor(t));
        }
        *wait_s += seconds_since(t_wait);
      }
      model_.forward_layer(l);
    }
  }
  const double loss = model_.loss_and_grad(dy_, tc_.batch, 1.0f / (tc_.batch * tc_.accum));
  // A straggler's compute is slow: its gradients reach the sync late (after the parameters
  // arrived, before backward hands over the first tensor).
  if (const long ms = straggler_.delay_ms(rank_, step_); ms > 0 && m == tc_.accum - 1) {
    TraceScope ts(trace_, "straggler_sleep", "compute");
    // It stands for slow compute: the watchers that vouch for a live trainer (ps; the peers'
    // under asp/ssp) count it.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    peer_watch_.working_until(until);
    env_.sync.working_until(until);
    std::this_thread::sleep_until(until);
  }
  TraceScope tb(trace_, "backward", "compute");
  const bool last = m + 1 == tc_.accum;
  for (int l = L - 1; l >= 0; --l) {
    model_.backward_layer(l, m > 0);
    if (!last) continue;
    for (auto t : layer_t_[l]) {
      const TensorSpec& spec = layout.tensor(t);
      // The local gradient norm is read before the backend may reduce the buffer in place.
      if (metrics_.enabled())
        *grad_sq += env_.device.sum_squares(model_.grads() + spec.offset, spec.size);
      staging_.grads_down(spec);
      env_.sync.tensor_ready(t);
    }
  }
  return loss;
}

// Until 2026-12-02 untraced: the compute row showed a gap between the last backward and
// `evaluate` (46 ms of a 2048-wide ring step's 685 ms) that the summary counted as wait.
double TrainLoop::wait_flush() {
  const auto t_wait = Clock::now();
  TraceScope tw(trace_, "wait_flush", "wait");
  env_.sync.flush();
  return seconds_since(t_wait);
}

void TrainLoop::add_sync_stats(const SyncStepStats& st) {
  res_.comm_s += st.comm_s;
  res_.bytes_sent += st.bytes_sent;
  res_.bytes_recv += st.bytes_recv;
  for (auto& [k, v] : st.extra) res_.extra[k] += v;
}

void TrainLoop::record_step(int epoch, float lr, double loss, double step_s, double wait_s,
                            double grad_sq) {
  SyncStepStats st = env_.sync.take_stats();
  add_sync_stats(st);
  res_.compute_s += step_s - wait_s;
  res_.wait_s += wait_s;
  // The line's figures cover its whole iteration, from the previous line's time_s to its own:
  // compute + wait + other = that span, and samples_per_s is over it, as the summary's and the
  // progress line's rates are (over the step alone it read 10-40% above them where the loop's
  // work between steps was long: ps np 3 time-shared, 2026-12-01). A wait for the backend outside
  // a step (the flush before an evaluation or a checkpoint) is the next line's wait.
  const double now_s = seconds_since(t_start_) - eval_s_;
  const double line_s = now_s - last_line_s_;
  const double line_wait_s = wait_s + wait_between_s_;
  last_line_s_ = now_s;
  wait_between_s_ = 0;
  if (!std::isfinite(loss) && res_.diverged_step < 0) {
    res_.diverged_step = step_;
    if (rank_ == 0) {
      std::fprintf(stderr,
                   "[starring] rank 0: the training loss is %g at step %lld: training diverged "
                   "(a lower --lr or more --warmup-steps may help); the run goes on and fails at "
                   "its end\n",
                   loss, static_cast<long long>(step_));
      std::fflush(stderr);
    }
  }
  epoch_loss_ += loss;
  ++epoch_batches_;
  loss_acc_ += loss;
  ++loss_n_;
  MetricsLine line;
  if (metrics_.enabled()) {
    line.add_int("step", step_);
    line.add_int("epoch", epoch + 1);
    line.add("time_s", now_s);  // as the history's
    line.add("loss", loss);
    line.add("grad_norm", std::sqrt(grad_sq));
    line.add("lr", json_float(lr));
    line.add("samples_per_s", samples_per_step() / line_s);
    line.add("compute_s", step_s - wait_s);
    line.add("comm_s", st.comm_s);
    line.add("wait_s", line_wait_s);
    line.add("other_s", line_s - (step_s - wait_s) - line_wait_s);
    line.add_int("bytes_sent", static_cast<std::int64_t>(st.bytes_sent));
    line.add_int("bytes_recv", static_cast<std::int64_t>(st.bytes_recv));
    for (auto& [k, v] : st.extra) line.add(k, v);
  }
  // Written now, or (--metrics-loss all) once every worker's loss of the step is in.
  step_losses_.after_step(step_, loss, std::move(line));
  if (rank_ == 0) {
    const double elapsed = seconds_since(t_start_) - eval_s_;
    progress_.update(step_, epoch + 1, loss_acc_ / std::max(loss_n_, 1),
                     (step_ - res_.resumed_step) * samples_per_step() / elapsed);
    if (step_ % std::max(cfg_.out.log_every, 1) == 0) loss_acc_ = loss_n_ = 0;
  }
}

// A worker that waits at a barrier for one that stopped because a parameter server did not answer
// times out first under asp (its wait began earlier and is shorter than a reply's deadline): the
// backend checks its servers before the barrier's timeout, which names that worker, is reported.
void TrainLoop::barrier(const std::string& what) {
  try {
    meet(what);
    env_.workers.barrier(env_.workers.timeout());
  } catch (const TimeoutError& e) {
    const std::string why =
        detail::concat(" (checked as a barrier of the workers timed out: ", e.what(), ")");
    try {
      env_.sync.check_peers();
    } catch (const TimeoutError& p) {
      throw TimeoutError(p.what() + why);
    } catch (const std::exception& p) {
      throw Error(p.what() + why);
    }
    throw;
  }
}

void TrainLoop::meet(const std::string& what) {
  // Under synchronous training (the ring's PeerWatch answers only its collective's waits) no
  // worker gets far ahead: the barrier alone is the meeting (each await costs a round of notes,
  // 10-20 ms).
  if (!peer_watch_.enabled() || env_.sync.max_step_skew() == 0) return;
  env_.sync.waiting_for_workers(true);
  try {
    peer_watch_.await(what);
  } catch (...) {
    env_.sync.waiting_for_workers(false);
    throw;
  }
  env_.sync.waiting_for_workers(false);
}

void TrainLoop::evaluate(int epoch) {
  // Waiting for the last step's communication is the training's, not the evaluation's: it counts
  // as wait and stays in the wall time (step time = compute + wait + the loop's own work).
  const double flush_s = wait_flush();
  res_.wait_s += flush_s;
  wait_between_s_ += flush_s;
  const auto t_eval = Clock::now();
  TraceScope te(trace_, "evaluate", "eval");
  // Every worker's pushes applied (ps asp/ssp), then every worker takes the same parameters, and
  // none pushes its next step before all have them (a worker that only sends its counts to
  // worker 0 goes on at once: its next push reached the master copy before a slower worker's
  // refresh, which then evaluated another model).
  const std::string at = detail::concat("the evaluation of epoch ", epoch + 1);
  barrier(at);
  step_losses_.drain();  // every worker's losses sent before the barrier: the step lines first
  env_.sync.refresh_params();
  barrier(at);
  staging_.all_params_up();
  // Under asp/ssp a slower worker's share (a big test set: seconds, more than --timeout) is waited
  // for at a meeting before its counts; bsp and the ring send them at once, as before.
  EvalResult ev = evaluator_.run(test_, epoch_loss_, epoch_batches_,
                                 [&] { meet(detail::concat(at, " (its counts)")); });
  // The workers leave together, when worker 0 has every count: one that went on at once waited
  // for worker 0 in its next step, counted as training (a 2-worker ring's worker 1 read 5.93 s
  // of training over 8 epochs, worker 0 4.93 s, and the summary's wall_s took the 5.93).
  barrier(at);
  if (rank_ == 0)
    res_.final_train_loss = ev.train_loss;  // every worker's batches, not only its own
  eval_s_ += seconds_since(t_eval);
  const double train_s = seconds_since(t_start_) - eval_s_;     // this run's
  const double job_s = res_.earlier_worker0_train_s + train_s;  // worker 0's, every run's
  EpochRecord rec{epoch + 1, job_s, res_.final_train_loss, ev.accuracy, ev.loss, step_};
  // An epoch evaluated again (an earlier run cut inside it by --max-steps, extended by this one)
  // keeps its last evaluation: the history lists every epoch once.
  if (!res_.history.empty() && res_.history.back().epoch == rec.epoch) {
    res_.history.pop_back();
    res_.earlier_epochs = std::min(res_.earlier_epochs, res_.history.size());
  }
  res_.history.push_back(rec);
  res_.test_accuracy = ev.accuracy;
  res_.test_loss = ev.loss;
  if (rank_ != 0) return;
  char line[160];
  std::snprintf(line, sizeof line, "epoch %d: train loss %.4f  test accuracy %.4f  test loss %.4f",
                epoch + 1, rec.train_loss, ev.accuracy, ev.loss);
  progress_.message(line);
  metrics_.write({{"event", "eval"},
                  {"epoch", epoch + 1},
                  {"train_loss", rec.train_loss},
                  {"test_accuracy", ev.accuracy},
                  {"test_loss", ev.loss},
                  {"time_s", train_s}});  // the metrics file adds the earlier runs' time
}

namespace {

constexpr int kSetUpTag = tags::kSetUp;

// Setting up (the model, the checkpoint to resume from, worker 0's metrics file) can fail on
// some workers alone, after every rank agreed on the data (experiments/train_run.cc). The workers
// agree on it before the backend starts: a ring's peers of a failed worker sat out --timeout at
// the first barrier, and dedicated parameter servers waited for its start message until their
// --timeout or the job's MPI_Abort. On failure the workers that failed tell the backend why
// (abandon) and throw their own error, the others one that names the first failing worker and
// holds its message (experiments/main.cc then prints that message once).
std::unique_ptr<TrainLoop> set_up(const Config& cfg, TrainerEnv env, const Dataset& train,
                                  const Dataset& test) {
  std::unique_ptr<TrainLoop> loop;
  std::exception_ptr mine;
  std::string own, failed;  // failed: a failure_note (common/comm_util.h)
  try {
    loop = std::make_unique<TrainLoop>(cfg, env, train, test);
  } catch (const std::exception& e) {
    mine = std::current_exception();
    own = e.what();
    failed = failure_note(e, env.workers.rank());
  }
  try {
    failed = first_error(env.workers, failed, kSetUpTag, env.workers.timeout());
  } catch (const std::exception& e) {
    env.sync.abandon(e.what());
    if (mine) std::rethrow_exception(mine);
    if (!dynamic_cast<const TimeoutError*>(&e)) throw;
    throw TimeoutError(detail::concat(e.what(),
                                      " while the workers agreed that each had set up "
                                      "training"));
  }
  if (failed.empty()) return loop;
  if (mine) {  // the servers hear it from the workers that failed, not from a bystander
    env.sync.abandon(own);
    std::rethrow_exception(mine);
  }
  throw_peer_failure(env.workers.where(), failed, "could not set up training");
}

}  // namespace

TrainResult Trainer::run(const Dataset& train, const Dataset& test) {
  const std::unique_ptr<TrainLoop> owned = set_up(cfg_, env_, train, test);
  TrainLoop& loop = *owned;
  try {
    return loop.run();
  } catch (...) {
    // Stop the backend while the model's buffers still exist: its threads may still be writing
    // parameters into them or reading gradients (the loop's destructor frees them).
    try {
      env_.sync.shutdown();
    } catch (...) {  // the first error is the one to report
    }
    throw;
  }
}

}  // namespace starring
