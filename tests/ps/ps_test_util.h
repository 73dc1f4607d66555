// Shared pieces of the parameter-server tests: a small model layout whose sizes divide nothing
// evenly, closed-form gradients, the single-process reference, and one rank's part of a run.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/comm.h"
#include "common/inproc_comm.h"
#include "common/optimizer.h"
#include "common/param_layout.h"
#include "ps/ps_worker.h"
#include "ps/server_loop.h"

namespace starring::ps::testing {

// An MLP-like layout 23 -> 13 -> 7 -> 3, allocated in forward order, listed in backward order.
inline ParamLayout test_layout() {
  ParamLayout l;
  const int w[] = {23, 13, 7, 3};
  std::vector<std::size_t> off;
  std::size_t pos = 0;
  for (int k = 0; k < 3; ++k) {
    off.push_back(pos);
    pos += static_cast<std::size_t>(w[k] * w[k + 1] + w[k + 1]);
  }
  for (int k = 2; k >= 0; --k) {
    const auto o = off[static_cast<std::size_t>(k)];
    l.add_at("fc" + std::to_string(k) + ".weight", o, {w[k + 1], w[k]});
    l.add_at("fc" + std::to_string(k) + ".bias", o + static_cast<std::size_t>(w[k] * w[k + 1]),
             {w[k + 1]});
  }
  l.validate();
  return l;
}

// Gradients are multiples of 1/16 in [-0.5, 0.5]: every sum over workers is exact in float32
// whatever the order, so the servers' result must equal the reference bit for bit.
inline float grad_value(int worker, std::int64_t step, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(worker) * 13 +
                                              static_cast<std::size_t>(step) * 5) %
                                             17) -
                            8) /
         16.0f;
}
inline float init_value(std::size_t i) {
  return static_cast<float>(static_cast<int>(i % 11) - 5) / 8.0f;
}
inline float lr_of(std::int64_t step) { return 0.1f / static_cast<float>(step); }

inline OptimizerConfig test_opt(const std::string& type) {
  OptimizerConfig o;
  o.type = type;
  o.momentum = 0.9f;
  o.weight_decay = 0.01f;
  return o;
}

// One process applying the optimizer to the average of every worker's gradient, K steps.
inline std::vector<float> reference(const ParamLayout& l, int workers, int steps,
                                    const OptimizerConfig& oc) {
  std::vector<float> p(l.total()), g(l.total());
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = init_value(i);
  Optimizer opt(oc, 0, l.total());
  const float inv = 1.0f / static_cast<float>(workers);
  for (int t = 1; t <= steps; ++t) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      float s = 0;
      for (int w = 0; w < workers; ++w) s += grad_value(w, t, i);
      g[i] = s * inv;
    }
    opt.apply(p.data(), g.data(), 0, l.total(), lr_of(t), t);
  }
  return p;
}

// What a trainer does with a GradientSync for `steps` steps; returns the final parameters.
// `before_step(t)` runs at the start of each step (to slow a worker down, or go silent);
// `on_stats` gets what take_stats() says after each step's pushes and once more after the flush
// (the last step's replies); `before_shutdown` runs after the flush (a trainer's last meeting).
inline std::vector<float> train_worker(
    GradientSync& sync, int worker, int steps, const OptimizerConfig& oc,
    const std::function<void(int)>& before_step = {},
    const std::function<void(const SyncStepStats&)>& on_stats = {},
    const std::function<void()>& before_shutdown = {}) {
  const ParamLayout l = test_layout();
  std::vector<float> p(l.total()), g(l.total());
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = init_value(i);
  sync.start(l, {p.data(), g.data(), false, nullptr}, oc);
  try {
    for (int t = 1; t <= steps; ++t) {
      for (std::size_t k = l.num_tensors(); k-- > 0;) sync.wait_params(k);  // forward
      if (before_step) before_step(t);
      sync.begin_step(t, lr_of(t));
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = grad_value(worker, t, i);
      for (std::size_t k = 0; k < l.num_tensors(); ++k) sync.tensor_ready(k);  // backward
      const SyncStepStats st = sync.take_stats();
      if (on_stats) on_stats(st);
    }
    sync.flush();
    if (on_stats) on_stats(sync.take_stats());
    if (before_shutdown) before_shutdown();
  } catch (...) {
    // As Trainer::run: stop the communication thread before p and g go (after a failure it
    // still cancels the receives it posted into p).
    try {
      sync.shutdown();
    } catch (...) {
    }
    throw;
  }
  sync.shutdown();
  return p;
}

// Options for tests: small chunks and buckets so a tiny model still makes many messages.
inline PsWorkerOptions test_options(const std::string& consistency = "bsp") {
  PsWorkerOptions o;
  o.timeout = Seconds(20.0);
  o.bucket_mb = 300.0 / (1024 * 1024);  // ~300 bytes: several buckets
  o.chunk_bytes = 256;                  // 64 floats: several chunks per bucket and server
  o.consistency = consistency;
  o.staleness = 1;
  return o;
}

inline ServerOptions server_options(const PsWorkerOptions& w) {
  ServerOptions s;
  s.timeout = w.timeout;
  s.chunk_bytes = w.chunk_bytes;
  s.fault = w.fault;
  s.shared_memory = w.shared_memory;
  s.hold_min_fill = 0.0;  // the tests' chunks are tiny: still take the held-buffer path
  return s;
}

// Whether a server's data went where `shared_memory` says: every byte pushed to it and replied
// by it (bsp: replies are stable) through the workers' and its shared segments, or none.
inline void expect_data_path(const nlohmann::json& s, bool shared_memory) {
  const auto in = s["push_bytes_in"].get<std::uint64_t>();
  const auto out = s["reply_bytes_out"].get<std::uint64_t>();
  EXPECT_EQ(s["shm_push_bytes"].get<std::uint64_t>(), shared_memory ? in : 0) << s.dump();
  EXPECT_EQ(s["shm_reply_bytes"].get<std::uint64_t>(), shared_memory ? out : 0) << s.dump();
}

// Runs fn(comm) on n threads of one InProcWorld and returns each rank's error text ("" if none);
// `ended`, when given, receives the time each rank's fn returned or threw, and `on_end(rank)` is
// called then.
inline std::vector<std::string> run_world(
    int n, const std::function<void(std::shared_ptr<Comm>)>& fn,
    std::vector<std::chrono::steady_clock::time_point>* ended = nullptr,
    const std::function<void(int rank)>& on_end = {}) {
  InProcWorld world(n);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  if (ended) ended->assign(static_cast<std::size_t>(n), {});
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(world.comm(r));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
      if (ended) (*ended)[static_cast<std::size_t>(r)] = std::chrono::steady_clock::now();
      if (on_end) on_end(r);
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace starring::ps::testing
