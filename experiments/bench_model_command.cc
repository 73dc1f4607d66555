// `starring bench-model`: single-worker training throughput of the MLP on this rank's device.
//
// For each model (the default 784-256-128-10 and the wide 784-4096-4096-10 preset, plus the
// configured widths when --hidden is custom; --preset default or wide: that preset alone) it times
// full training steps -- forward, softmax cross-entropy, backward, optimizer step on the flat
// buffer -- on a fixed synthetic batch (cfg.train.batch rows). It then times, in the same run and
// on the same device, the bare GEMMs that step executes (forward Y = X W^T, backward dW = dY^T X
// and dX = dY W, layer 0 without dX) through OpenBLAS's cblas_sgemm (or the device's gemm on a
// GPU). Reported per model:
//   samples/s         batch / median step time
//   model GFLOP/s     6 * batch * sum(in*out) / step time (the usual training-FLOP count; it
//                     includes layer 0's dX, which the step skips)
//   step GFLOP/s      the GEMM FLOPs the step actually executes / step time
//   sgemm GFLOP/s     the same GEMMs alone / their time
//   ratio             step GFLOP/s / sgemm GFLOP/s: the fraction of the bare-GEMM speed the whole
//                     step keeps (1.0 = everything besides the GEMMs is free)
//   optimizer(ms)     the optimizer step alone on the flat buffer (part of the step time)
// Timing: cfg.bench.warmup untimed calls, then rounds of cfg.bench.iters calls (a tenth of that
// for models over 5M parameters) of the step, the bare GEMMs and the optimizer in turn, until at
// least 5 rounds and 2 s have passed (at most 200 rounds); the median round of each is reported.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/device.h"
#include "common/error.h"
#include "experiments/commands.h"
#include "experiments/host_cpus.h"
#include "trainer/mlp.h"

namespace starring {
namespace {

using Clock = std::chrono::steady_clock;

struct ModelSpec {
  std::string name;
  std::vector<int> widths;
};

struct Timing {
  double median_s = 0, best_s = 0;
  long long steps = 0;
};

// Median seconds per call of each fn over rounds of `iters` calls (see the file comment). The
// functions take turns round by round, so a load that comes and goes on a shared machine hits
// them alike and their ratio stays meaningful.
std::vector<Timing> time_rounds(Device& dev, int warmup, int iters,
                                const std::vector<std::function<void()>>& fns) {
  for (const auto& fn : fns)
    for (int i = 0; i < warmup; ++i) fn();
  dev.synchronize();
  std::vector<std::vector<double>> rounds(fns.size());
  double total = 0;
  while (rounds[0].size() < 5 || total < 2.0) {
    for (std::size_t f = 0; f < fns.size(); ++f) {
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) fns[f]();
      dev.synchronize();
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      rounds[f].push_back(s / iters);
      total += s;
    }
    if (rounds[0].size() >= 200) break;
  }
  std::vector<Timing> out;
  for (auto& r : rounds) {
    Timing t;
    t.steps = static_cast<long long>(r.size()) * iters;
    std::sort(r.begin(), r.end());
    const std::size_t h = r.size() / 2;  // an even count: the mean of the two middle values
    t.median_s = r.size() % 2 ? r[h] : (r[h - 1] + r[h]) / 2;
    t.best_s = r.front();
    out.push_back(t);
  }
  return out;
}

// The GEMMs one training step executes, as (trans_a, trans_b, m, n, k) on separate buffers of
// the right sizes, so they can be timed without the rest of the step.
struct GemmShape {
  bool ta, tb;
  int m, n, k;
};
std::vector<GemmShape> step_gemms(const std::vector<int>& w, int batch) {
  std::vector<GemmShape> g;
  const int L = static_cast<int>(w.size()) - 1;
  for (int l = 0; l < L; ++l) g.push_back({false, true, batch, w[l + 1], w[l]});  // forward
  for (int l = L - 1; l >= 0; --l) {
    g.push_back({true, false, w[l + 1], w[l], batch});              // dW = dY^T X
    if (l > 0) g.push_back({false, false, batch, w[l], w[l + 1]});  // dX = dY W
  }
  return g;
}

class GemmBaseline {
 public:
  GemmBaseline(Device& dev, std::vector<GemmShape> shapes) : dev_(dev), shapes_(std::move(shapes)) {
    for (const auto& s : shapes_) {
      a_.push_back(dev.alloc(static_cast<std::size_t>(s.m) * s.k));
      b_.push_back(dev.alloc(static_cast<std::size_t>(s.k) * s.n));
      c_.push_back(dev.alloc(static_cast<std::size_t>(s.m) * s.n));
      std::vector<float> h(
          std::max(static_cast<std::size_t>(s.m) * s.k, static_cast<std::size_t>(s.k) * s.n));
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = 0.01f * static_cast<float>(i % 97) - 0.48f;
      dev.to_device(a_.back(), h.data(), static_cast<std::size_t>(s.m) * s.k);
      dev.to_device(b_.back(), h.data(), static_cast<std::size_t>(s.k) * s.n);
      flops_ += 2.0 * s.m * s.n * s.k;
    }
  }
  ~GemmBaseline() {
    for (auto* v : {&a_, &b_, &c_})
      for (float* p : *v) dev_.free(p);
  }
  double flops() const { return flops_; }
  void run() {
    for (std::size_t i = 0; i < shapes_.size(); ++i) {
      const GemmShape& s = shapes_[i];
      if (dev_.is_gpu()) {
        dev_.gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a_[i], b_[i], 0.0f, c_[i]);
      } else {  // OpenBLAS itself, not through the Device
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                    s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a_[i], s.ta ? s.m : s.k,
                    b_[i], s.tb ? s.k : s.n, 0.0f, c_[i], s.n);
      }
    }
  }

 private:
  Device& dev_;
  std::vector<GemmShape> shapes_;
  std::vector<float*> a_, b_, c_;
  double flops_ = 0;
};

// Synthetic batch: pixels in [0, 1) and labels, closed-form in the row and column.
struct DeviceBatch {
  Device& dev;
  float* x;
  int* y;
  DeviceBatch(Device& d, int batch, int dim, int classes) : dev(d) {
    std::vector<float> hx(static_cast<std::size_t>(batch) * dim);
    std::vector<int> hy(batch);
    for (int r = 0; r < batch; ++r) {
      hy[r] = r % classes;
      for (int j = 0; j < dim; ++j)
        hx[r * dim + j] = static_cast<float>((r * 131 + j * 7) % 256) / 256.0f;
    }
    x = dev.alloc(hx.size());
    y = dev.alloc_int(hy.size());
    dev.to_device(x, hx.data(), hx.size());
    dev.to_device_int(y, hy.data(), hy.size());
  }
  ~DeviceBatch() {
    dev.free(x);
    dev.free_int(y);
  }
};

nlohmann::json bench_one(Device& dev, const Config& cfg, const ModelSpec& spec) {
  const int batch = cfg.train.batch;
  Mlp mlp(dev, spec.widths, batch, cfg.train.seed);
  DeviceBatch data(dev, batch, spec.widths.front(), spec.widths.back());
  const std::size_t n = mlp.num_params();
  float* s1 = dev.alloc(n);
  float* s2 = dev.alloc(n);
  std::int64_t step = 0;
  double loss = 0;
  auto train_step = [&] {
    mlp.set_input(data.x, batch);
    for (int l = 0; l < mlp.num_layers(); ++l) mlp.forward_layer(l);
    loss = mlp.loss_and_grad(data.y, batch, 1.0f / batch);
    for (int l = mlp.num_layers() - 1; l >= 0; --l) mlp.backward_layer(l, false);
    dev.optimizer_step(cfg.train.opt, mlp.params(), mlp.grads(), s1, s2, n, 1e-3f, ++step);
  };
  auto opt_step = [&] {
    dev.optimizer_step(cfg.train.opt, mlp.params(), mlp.grads(), s1, s2, n, 1e-3f, ++step);
  };
  GemmBaseline gemms(dev, step_gemms(spec.widths, batch));
  // Few iterations per round for the wide model (a step takes 0.1 s or more on one core).
  const int iters = std::max(1, n > 5'000'000 ? cfg.bench.iters / 10 : cfg.bench.iters);
  std::vector<Timing> t =
      time_rounds(dev, cfg.bench.warmup, iters, {train_step, [&] { gemms.run(); }, opt_step});
  const Timing &t_step = t[0], &t_gemm = t[1], &t_opt = t[2];
  STARRING_CHECK(std::isfinite(loss), "bench-model: loss became ", loss);
  dev.free(s1);
  dev.free(s2);

  const double model_flops = mlp.train_flops(batch);
  nlohmann::json row;
  row["bench"] = "model";
  row["model"] = spec.name;
  row["widths"] = spec.widths;
  row["params"] = n;
  row["batch"] = batch;
  row["device"] = dev.name();
  row["threads"] = cfg.train.threads;
  row["blas_core"] = openblas_get_corename();
  row["load_average"] = load_average();
  row["optimizer"] = cfg.train.opt.type;
  row["steps_timed"] = t_step.steps;
  row["step_ms"] = t_step.median_s * 1e3;
  row["step_ms_best"] = t_step.best_s * 1e3;
  row["samples_per_s"] = batch / t_step.median_s;
  row["model_gflops"] = model_flops / t_step.median_s / 1e9;
  row["step_gemm_gflops"] = gemms.flops() / t_step.median_s / 1e9;
  row["sgemm_ms"] = t_gemm.median_s * 1e3;
  row["sgemm_gflops"] = gemms.flops() / t_gemm.median_s / 1e9;
  row["ratio"] = t_gemm.median_s / t_step.median_s;
  row["optimizer_ms"] = t_opt.median_s * 1e3;
  return row;
}

// --preset default or wide: that model alone (it was timed beside the other, and the option
// ignored); none: both, the cost model's references; --hidden (--preset custom): both and then it.
std::vector<ModelSpec> models(const Config& cfg) {
  std::vector<int> w = {784};  // the configured model's widths
  w.insert(w.end(), cfg.model.hidden.begin(), cfg.model.hidden.end());
  w.push_back(10);
  if (cfg.model.preset_given && cfg.model.preset != "custom") return {{cfg.model.preset, w}};
  std::vector<ModelSpec> m = {{"default", {784, 256, 128, 10}}, {"wide", {784, 4096, 4096, 10}}};
  if (cfg.model.preset == "custom") m.push_back({"custom", w});
  return m;
}

void print_table_header(const Device& dev, const Config& cfg) {
  std::printf("# bench-model: device %s, OpenBLAS threads %d (%s), batch %d, optimizer %s\n",
              dev.name().c_str(), cfg.train.threads, openblas_get_corename(), cfg.train.batch,
              cfg.train.opt.type.c_str());
  std::printf("# load average %s on %u cores at start\n", load_average().c_str(),
              std::thread::hardware_concurrency());
  std::printf("# %-8s %10s %10s %9s %11s %11s %11s %9s %7s %8s\n", "model", "params", "samples/s",
              "step(ms)", "model-GF/s", "step-GF/s", "sgemm-GF/s", "sgemm(ms)", "ratio", "opt(ms)");
}

void print_row(const nlohmann::json& r) {
  std::printf("  %-8s %10lld %10.0f %9.3f %11.1f %11.1f %11.1f %9.3f %7.3f %8.3f\n",
              r["model"].get<std::string>().c_str(), r["params"].get<long long>(),
              r["samples_per_s"].get<double>(), r["step_ms"].get<double>(),
              r["model_gflops"].get<double>(), r["step_gemm_gflops"].get<double>(),
              r["sgemm_gflops"].get<double>(), r["sgemm_ms"].get<double>(),
              r["ratio"].get<double>(), r["optimizer_ms"].get<double>());
  std::fflush(stdout);
}

}  // namespace

int run_bench_model(Config& cfg, std::shared_ptr<Comm> world) {
  // A single-worker benchmark: under mpirun only world rank 0 measures.
  if (world && world->rank() != 0) return 0;
  STARRING_CONFIG_CHECK(cfg.train.batch > 0, "--batch must be positive");
  STARRING_CONFIG_CHECK(cfg.bench.iters > 0 && cfg.bench.warmup >= 0,
                        "bench-model: --iters must be positive and --warmup non-negative");
  auto dev = make_device(cfg.train.device, cfg.train.threads, 0);
  if (!cfg.bench.json) print_table_header(*dev, cfg);
  for (const ModelSpec& spec : models(cfg)) {
    nlohmann::json row = bench_one(*dev, cfg, spec);
    if (!cfg.out.run_name.empty()) row["run_name"] = cfg.out.run_name;
    if (cfg.bench.json)
      std::printf("%s\n", row.dump().c_str());
    else
      print_row(row);
  }
  if (!cfg.bench.json)
    std::printf(
        "# model-GF/s = 6 x weights x batch per step (the usual model-FLOPs count: it includes "
        "the first layer's input gradient, which training does not compute, so it can exceed "
        "sgemm-GF/s); step-GF/s = FLOPs of the GEMMs the step runs / step time\n"
        "# ratio = step GEMM FLOP/s / bare sgemm FLOP/s on the same shapes (1.0: the rest "
        "of the step is free)\n");
  return 0;
}

}  // namespace starring
