#include "trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <thread>

#include "common/error.h"
#include "trainer/evaluate.h"
#include "trainer/metrics.h"
#include "trainer/mlp.h"
#include "trainer/sampler.h"

namespace starring {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "RANK:VALUE" -> (rank, value); rank -1 when the spec is empty.
std::pair<int, long> parse_rank_spec(const std::string& spec, const char* what) {
  if (spec.empty()) return {-1, 0};
  auto colon = spec.find(':');
  STARRING_CONFIG_CHECK(colon != std::string::npos, "--", what, " expects RANK:VALUE, got '", spec,
                        "'");
  try {
    return {std::stoi(spec.substr(0, colon)), std::stol(spec.substr(colon + 1))};
  } catch (const std::exception&) {
    throw ConfigError("--" + std::string(what) + " expects RANK:VALUE, got '" + spec + "'");
  }
}

// Host copies of the model's buffers when the model lives on a GPU but the backend works on
// host memory (ring/mpi/ps): gradients go down per layer, parameters come back per tensor.
class Staging {
 public:
  Staging(Mlp& model, bool needed) : model_(model), needed_(needed) {
    if (!needed_) return;
    params_.resize(model.num_params());
    grads_.resize(model.num_params());
    model.device().to_host(params_.data(), model.params(), params_.size());
  }
  SyncBuffers buffers() {
    if (!needed_) return {model_.params(), model_.grads(), model_.device().is_gpu(), &model_.device()};
    return {params_.data(), grads_.data(), false, &model_.device()};
  }
  void grads_down(const TensorSpec& t) {
    if (needed_) model_.device().to_host(grads_.data() + t.offset, model_.grads() + t.offset, t.size);
  }
  void params_up(const TensorSpec& t) {
    if (needed_) model_.device().to_device(model_.params() + t.offset, params_.data() + t.offset, t.size);
  }
  void all_params_up() {
    if (needed_) model_.device().to_device(model_.params(), params_.data(), params_.size());
  }

 private:
  Mlp& model_;
  bool needed_;
  std::vector<float> params_, grads_;
};

}  // namespace

float Trainer::learning_rate(const TrainConfig& t, std::int64_t step, std::int64_t total_steps,
                             int workers) {
  double scale = 1.0;
  if (t.lr_scale == "linear") scale = workers;
  if (t.lr_scale == "sqrt") scale = std::sqrt(static_cast<double>(workers));
  const double target = t.lr * scale;
  if (t.warmup_steps > 0 && step <= t.warmup_steps) {
    double f = static_cast<double>(step) / t.warmup_steps;
    return static_cast<float>(t.lr + (target - t.lr) * f);
  }
  if (t.lr_schedule == "cosine" && total_steps > t.warmup_steps) {
    double p = static_cast<double>(step - t.warmup_steps) / (total_steps - t.warmup_steps);
    return static_cast<float>(target * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, p))));
  }
  return static_cast<float>(target);
}

Trainer::Trainer(const Config& cfg, TrainerEnv env) : cfg_(cfg), env_(env) {}

TrainResult Trainer::run(const Dataset& train, const Dataset& test) {
  const TrainConfig& tc = cfg_.train;
  const int rank = env_.workers.rank(), world = env_.workers.size();
  const bool leader = rank == 0;
  Trace* trace = env_.trace;
  if (trace) trace->set_thread_name("compute");

  std::vector<int> widths{train.dim};
  widths.insert(widths.end(), cfg_.model.hidden.begin(), cfg_.model.hidden.end());
  widths.push_back(train.classes);
  const int eval_batch = std::max(tc.batch, 256);
  Mlp model(env_.device, widths, eval_batch, tc.seed);  // same seed everywhere: same init
  const ParamLayout& layout = model.layout();

  DistributedSampler sampler(train.n, rank, world, tc.batch, tc.seed);
  const std::int64_t steps_per_epoch = static_cast<std::int64_t>(sampler.batches_per_epoch()) / tc.accum;
  STARRING_CONFIG_CHECK(steps_per_epoch > 0, "batch ", tc.batch, " x accum ", tc.accum,
                        " is larger than this worker's shard (", train.n / world, " of ", train.n,
                        " samples over ", world, " workers)");
  std::int64_t total_steps = steps_per_epoch * tc.epochs;
  if (tc.max_steps >= 0) total_steps = std::min(total_steps, tc.max_steps);
  const int epochs = static_cast<int>((total_steps + steps_per_epoch - 1) / steps_per_epoch);

  Staging staging(model, env_.device.is_gpu() && !env_.sync.accepts_device_buffers());
  env_.sync.start(layout, staging.buffers(), tc.opt);

  auto [straggler_rank, straggler_ms] = parse_rank_spec(tc.straggler, "straggler");
  std::string fault_kind;
  std::pair<int, long> fault{-1, 0};
  if (!tc.fault.empty()) {
    auto c = tc.fault.find(':');
    fault_kind = tc.fault.substr(0, c);
    STARRING_CONFIG_CHECK(c != std::string::npos && (fault_kind == "kill" || fault_kind == "hang"),
                          "--fault expects kill:RANK:STEP or hang:RANK:STEP, got '", tc.fault, "'");
    fault = parse_rank_spec(tc.fault.substr(c + 1), "fault");
  }

  // Per-layer tensor lists, and the buffers for one micro-batch.
  const int L = model.num_layers();
  std::vector<std::vector<std::size_t>> layer_t(L);
  for (int l = 0; l < L; ++l) {
    layer_t[l] = model.layer_tensors(l);
    std::sort(layer_t[l].begin(), layer_t[l].end());
  }
  std::vector<float> xb(static_cast<std::size_t>(tc.batch) * train.dim);
  std::vector<int> yb(tc.batch);
  float* dx = env_.device.alloc(xb.size());
  int* dy = env_.device.alloc_int(yb.size());

  MetricsWriter metrics(leader ? cfg_.out.metrics_file : "");
  Progress progress(cfg_.out.progress, total_steps, cfg_.out.log_every, leader);
  Evaluator evaluator(model, env_.workers, eval_batch);

  TrainResult res;
  res.widths = widths;
  res.num_params = layout.total();
  std::int64_t step = 0;
  double loss_acc = 0;
  int loss_n = 0;
  const auto t_start = Clock::now();
  double eval_s = 0;

  for (int epoch = 0; epoch < epochs && step < total_steps; ++epoch) {
    sampler.set_epoch(epoch);
    double epoch_loss = 0;
    int epoch_batches = 0;
    for (std::int64_t s = 0; s < steps_per_epoch && step < total_steps; ++s) {
      ++step;
      const auto t_step = Clock::now();
      double wait_s = 0;
      const float lr = learning_rate(tc, step, total_steps, world);
      env_.sync.begin_step(step, lr);
      if (fault.first == rank && step == fault.second) {
        if (fault_kind == "kill") std::raise(SIGKILL);
        std::fprintf(stderr, "[starring] rank %d: --fault hang: going silent at step %lld\n", rank,
                     static_cast<long long>(step));
        std::this_thread::sleep_for(std::chrono::hours(24));
      }
      double step_loss = 0;
      for (int m = 0; m < tc.accum; ++m) {
        auto idx = sampler.batch(static_cast<std::size_t>(s) * tc.accum + m);
        for (std::size_t i = 0; i < idx.size(); ++i) {
          std::copy_n(train.x.data() + idx[i] * train.dim, train.dim, xb.data() + i * train.dim);
          yb[i] = train.y[idx[i]];
        }
        env_.device.to_device(dx, xb.data(), xb.size());
        env_.device.to_device_int(dy, yb.data(), yb.size());
        model.set_input(dx, tc.batch);
        {
          TraceScope ts(trace, "forward", "compute");
          for (int l = 0; l < L; ++l) {
            if (m == 0) {
              const auto t_wait = Clock::now();
              TraceScope tw(trace, "wait_params", "wait");
              for (auto t : layer_t[l]) {
                env_.sync.wait_params(t);
                staging.params_up(layout.tensor(t));
              }
              wait_s += seconds_since(t_wait);
            }
            model.forward_layer(l);
          }
        }
        step_loss += model.loss_and_grad(dy, tc.batch, 1.0f / (tc.batch * tc.accum)) / tc.accum;
        TraceScope tb(trace, "backward", "compute");
        for (int l = L - 1; l >= 0; --l) {
          model.backward_layer(l, m > 0);
          if (m + 1 == tc.accum) {
            for (auto t : layer_t[l]) {
              staging.grads_down(layout.tensor(t));
              env_.sync.tensor_ready(t);
            }
          }
        }
      }
      double grad_norm = 0;
      if (metrics.enabled()) grad_norm = std::sqrt(env_.device.sum_squares(model.grads(), layout.total()));
      if (straggler_rank == rank && straggler_ms > 0) {
        TraceScope tsl(trace, "straggler_sleep", "compute");
        std::this_thread::sleep_for(std::chrono::milliseconds(straggler_ms));
      }
      const double step_s = seconds_since(t_step);
      SyncStepStats st = env_.sync.take_stats();
      res.compute_s += step_s - wait_s;
      res.wait_s += wait_s;
      res.comm_s += st.comm_s;
      res.bytes_sent += st.bytes_sent;
      res.bytes_recv += st.bytes_recv;
      for (auto& [k, v] : st.extra) res.extra[k] += v;
      epoch_loss += step_loss;
      ++epoch_batches;
      loss_acc += step_loss;
      ++loss_n;
      const double sps = static_cast<double>(tc.batch) * tc.accum * world / step_s;
      if (metrics.enabled()) {
        nlohmann::json j{{"step", step}, {"epoch", epoch + 1}, {"time_s", seconds_since(t_start)},
                         {"loss", step_loss}, {"grad_norm", grad_norm}, {"lr", lr},
                         {"samples_per_s", sps}, {"compute_s", step_s - wait_s},
                         {"comm_s", st.comm_s}, {"wait_s", wait_s},
                         {"bytes_sent", st.bytes_sent}, {"bytes_recv", st.bytes_recv}};
        for (auto& [k, v] : st.extra) j[k] = v;
        metrics.write(j);
      }
      if (leader) {
        double elapsed = seconds_since(t_start) - eval_s;
        progress.update(step, epoch + 1, loss_acc / std::max(loss_n, 1),
                        step * static_cast<double>(tc.batch) * tc.accum * world / elapsed);
        if (step % std::max(cfg_.out.log_every, 1) == 0) loss_acc = loss_n = 0;
      }
    }
    res.final_train_loss = epoch_loss / std::max(epoch_batches, 1);
    const bool last = epoch + 1 == epochs || step >= total_steps;
    if (tc.eval_each_epoch || last) {
      const auto t_eval = Clock::now();
      TraceScope te(trace, "evaluate", "eval");
      {
        const auto t_wait = Clock::now();
        env_.sync.flush();
        res.wait_s += seconds_since(t_wait);
      }
      staging.all_params_up();
      EvalResult ev = evaluator.run(test);
      eval_s += seconds_since(t_eval);
      EpochRecord rec{epoch + 1, seconds_since(t_start) - eval_s, res.final_train_loss, ev.accuracy,
                      ev.loss};
      res.history.push_back(rec);
      res.test_accuracy = ev.accuracy;
      res.test_loss = ev.loss;
      if (leader) {
        char line[160];
        std::snprintf(line, sizeof line, "epoch %d: train loss %.4f  test accuracy %.4f  test loss %.4f",
                      epoch + 1, rec.train_loss, ev.accuracy, ev.loss);
        progress.message(line);
        metrics.write({{"event", "eval"}, {"epoch", epoch + 1}, {"test_accuracy", ev.accuracy},
                       {"test_loss", ev.loss}, {"time_s", rec.wall_s}});
      }
    }
  }
  env_.sync.flush();
  {  // traffic that completed after the last step's take_stats (its sync finished in flush)
    SyncStepStats st = env_.sync.take_stats();
    res.comm_s += st.comm_s;
    res.bytes_sent += st.bytes_sent;
    res.bytes_recv += st.bytes_recv;
  }
  staging.all_params_up();
  res.params.resize(layout.total());
  env_.device.to_host(res.params.data(), model.params(), layout.total());
  progress.done();
  res.steps = step;
  res.wall_s = seconds_since(t_start) - eval_s;
  res.samples_per_s = step * static_cast<double>(tc.batch) * tc.accum * world / std::max(res.wall_s, 1e-9);
  env_.device.free(dx);
  env_.device.free_int(dy);
  metrics.finish();
  return res;
}

}  // namespace starring
