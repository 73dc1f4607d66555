// Every worker's loss in worker 0's metrics lines (trainer/step_losses.h, --metrics-loss all):
//  - StepLosses alone, losses a closed-form function of (worker, step): global_loss, loss_min,
//    loss_max and loss_max_worker exact, for 1..4 workers, lines in step order; under asp
//    (no lag) lines wait for the drain; a silent worker ends the wait with a TimeoutError naming it
//    and the step, within --timeout.
//  - Training on the ring and the parameter server (bsp, co-located, ssp, asp): the line's
//    global_loss of every step is one worker's loss on the global batch (bsp, within float
//    reassociation), between loss_min and loss_max, and the parameters are the same bits with
//    --metrics-loss all, worker0 and no metrics file.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include "common/error.h"
#include "common/gradient_sync.h"
#include "common/inproc_comm.h"
#include "tests/scratch_dir.h"
#include "train_fixture.h"
#include "trainer/step_losses.h"

namespace starring {
namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  for (std::string l; std::getline(f, l);) out.push_back(nlohmann::json::parse(l));
  return out;
}

std::vector<nlohmann::json> step_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (auto& j : read_lines(path))
    if (!j.contains("event")) out.push_back(j);
  return out;
}

double loss_of(int worker, std::int64_t step) { return 1.0 + 0.5 * worker + 0.01 * step; }

// Runs `steps` steps of StepLosses on `workers` in-process workers; worker 0 writes `path`.
void gather(int workers, int steps, int lag, const std::string& path) {
  run_ranks(workers, [&](Comm& c) {
    MetricsWriter m(c.rank() == 0 ? path : "");
    StepLosses sl(c, m, true, lag);
    for (int s = 1; s <= steps; ++s) {
      nlohmann::json line;
      if (c.rank() == 0) line = {{"step", s}, {"loss", loss_of(0, s)}};
      sl.after_step(s, loss_of(c.rank(), s), std::move(line));
    }
    c.barrier(c.timeout());
    sl.drain();
    EXPECT_EQ(sl.held(), 0u);
    m.finish();
  });
}

TEST(StepLosses, MeanMinMaxOfEveryWorkerExactly) {
  const std::string dir = testing::scratch_dir("step_losses_exact");
  for (int w : {1, 2, 3, 4}) {
    const std::string path = dir + "/m" + std::to_string(w) + ".jsonl";
    gather(w, 7, lag_for_skew(0), path);
    const auto lines = step_lines(path);
    ASSERT_EQ(lines.size(), 7u) << w;
    for (int s = 1; s <= 7; ++s) {
      const auto& j = lines[s - 1];
      EXPECT_EQ(j["step"], s);
      double sum = 0;
      for (int r = 0; r < w; ++r) sum += loss_of(r, s);
      EXPECT_EQ(j["global_loss"].get<double>(), sum / w) << "workers " << w << " step " << s;
      EXPECT_EQ(j["loss_min"].get<double>(), loss_of(0, s));
      EXPECT_EQ(j["loss_max"].get<double>(), loss_of(w - 1, s));
      EXPECT_EQ(j["loss_max_worker"], w - 1);
      EXPECT_EQ(j["loss"].get<double>(), loss_of(0, s));  // worker 0's, unchanged
    }
  }
}

// A worker whose loss is not a number is the highest (the first such worker is named, as ties
// are), and loss_min is the lowest of the others, also when worker 0, whose loss starts the
// scan, is one of them: a NaN kept as the minimum, or the last diverged worker named, passed
// every test while only worker 1 diverged (helper-112's mutation test).
TEST(StepLosses, ADivergedWorkerIsTheHighest) {
  struct Case {
    int workers;
    std::vector<int> diverged;
    double min;
    int max_worker;
  };
  for (const Case& k : {Case{3, {1}, 2.0, 1}, Case{4, {0, 2}, 3.0, 0}}) {
    const std::string path = testing::scratch_dir("step_losses_nan") + "/m.jsonl";
    run_ranks(k.workers, [&](Comm& c) {
      MetricsWriter m(c.rank() == 0 ? path : "");
      StepLosses sl(c, m, true, 2);
      nlohmann::json line;
      if (c.rank() == 0) line = {{"step", 1}};
      const bool nan =
          std::find(k.diverged.begin(), k.diverged.end(), c.rank()) != k.diverged.end();
      sl.after_step(1, nan ? std::nan("") : 2.0 + c.rank(), std::move(line));
      c.barrier(c.timeout());
      sl.drain();
      m.finish();
    });
    const auto j = step_lines(path).at(0);
    const std::string what = std::to_string(k.workers) + " workers";
    EXPECT_TRUE(j["global_loss"].is_null()) << what;  // NaN, written as null
    EXPECT_TRUE(j["loss_max"].is_null()) << what;
    EXPECT_EQ(j["loss_max_worker"], k.max_worker) << what;
    ASSERT_TRUE(j["loss_min"].is_number()) << what << ": " << j.dump();
    EXPECT_EQ(j["loss_min"].get<double>(), k.min) << what;
  }
}

// asp: no wait in the loop; a worker far behind leaves worker 0's lines held until the drain.
TEST(StepLosses, WithoutALagLinesWaitForTheDrainInOrder) {
  const std::string path = testing::scratch_dir("step_losses_asp") + "/m.jsonl";
  run_ranks(2, [&](Comm& c) {
    MetricsWriter m(c.rank() == 0 ? path : "");
    StepLosses sl(c, m, true, lag_for_skew(-1));
    if (c.rank() == 0) {
      for (int s = 1; s <= 6; ++s) sl.after_step(s, 1.0, {{"step", s}});
      EXPECT_EQ(sl.held(), 6u);  // worker 1 has sent nothing yet
      c.send("go", 2, 1, 5, c.timeout());
    } else {
      char go[2];
      c.recv(go, 2, 0, 5, c.timeout());
      for (int s = 1; s <= 6; ++s) sl.after_step(s, 3.0, nullptr);
    }
    c.barrier(c.timeout());
    sl.drain();
    m.finish();
  });
  const auto lines = step_lines(path);
  ASSERT_EQ(lines.size(), 6u);
  for (int s = 1; s <= 6; ++s) {
    EXPECT_EQ(lines[s - 1]["step"], s);
    EXPECT_EQ(lines[s - 1]["global_loss"].get<double>(), 2.0);
  }
}

// A worker that sends no loss: worker 0's wait for step 1 (after step 3, lag 2) ends within the
// timeout with an error naming the worker and the step, never a hang.
TEST(StepLosses, ASilentWorkerIsNamedWithinTheTimeout) {
  const std::string path = testing::scratch_dir("step_losses_silent") + "/m.jsonl";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_ranks(
        3,
        [&](Comm& c) {
          MetricsWriter m(c.rank() == 0 ? path : "");
          StepLosses sl(c, m, true, 2);
          for (int s = 1; s <= 3; ++s) {
            if (c.rank() == 2) return;  // silent from the start
            sl.after_step(s, 1.0, c.rank() == 0 ? nlohmann::json{{"step", s}} : nullptr);
          }
          if (c.rank() == 0) ADD_FAILURE() << "worker 0 went past step 3";
        },
        Seconds(0.3));
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0: timeout after 0.3 s in recv from rank 2"), std::string::npos)
        << what;
    EXPECT_NE(what.find("worker 2's loss of step 1"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

// --- training ---------------------------------------------------------------------------------

constexpr int kSteps = 10;

struct Outcome {
  std::vector<nlohmann::json> lines;
  std::vector<float> params;
};

Outcome train(Config cfg, int world, const std::string& metrics, const std::string& mode = "all") {
  cfg.train.max_steps = kSteps;
  cfg.out.metrics_file = metrics;
  cfg.out.metrics_loss = mode;
  auto outs = testing::train_inproc(cfg, world);
  Outcome r;
  for (auto& o : outs)
    if (o.role == "worker" && r.params.empty()) r.params = o.result.params;
  if (!metrics.empty()) r.lines = step_lines(metrics);
  return r;
}

Config backend(const std::string& name, const std::string& servers = "",
               const std::string& consistency = "bsp") {
  Config cfg = testing::small_config();
  cfg.sync.backend = name;
  if (name == "ps") {
    cfg.sync.servers = servers;
    cfg.sync.consistency = consistency;
    cfg.sync.ps_chunk_bytes = 1024;
  }
  return cfg;
}

void expect_bounds(const std::vector<nlohmann::json>& lines, int workers, const std::string& what) {
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kSteps)) << what;
  for (int s = 1; s <= kSteps; ++s) {
    const auto& j = lines[s - 1];
    EXPECT_EQ(j["step"], s) << what;
    const double g = j["global_loss"], lo = j["loss_min"], hi = j["loss_max"], l0 = j["loss"];
    EXPECT_LE(lo, g) << what << " step " << s;
    EXPECT_LE(g, hi) << what << " step " << s;
    EXPECT_LE(lo, l0) << what << " step " << s;
    EXPECT_LE(l0, hi) << what << " step " << s;
    EXPECT_GE(j["loss_max_worker"].get<int>(), 0);
    EXPECT_LT(j["loss_max_worker"].get<int>(), workers);
  }
}

// Synchronous training: the mean of the W workers' step losses is one worker's on the global
// batch (the sampler's W shards of a step are the one worker's batch), within reassociation.
TEST(StepLossesTraining, GlobalLossIsOneWorkersOnTheGlobalBatch) {
  const std::string dir = testing::scratch_dir("step_losses_train");
  constexpr int W = 2;
  Config one = testing::small_config();
  one.train.batch *= W;
  const Outcome ref = train(one, 1, dir + "/one.jsonl");
  ASSERT_EQ(ref.lines.size(), static_cast<std::size_t>(kSteps));
  struct Case {
    Config cfg;
    int world;
    std::string name;
  };
  for (const Case& c : {Case{backend("ring"), W, "ring"}, Case{backend("ps", "1"), W + 1, "ps 1"},
                        Case{backend("ps", "colocated"), W, "ps colocated"}}) {
    const Outcome run = train(c.cfg, c.world, dir + "/w.jsonl");
    expect_bounds(run.lines, W, c.name);
    // the held lines come before the evaluation's: it is the file's last line
    const auto all = read_lines(dir + "/w.jsonl");
    ASSERT_FALSE(all.empty());
    EXPECT_EQ(all.back().value("event", ""), "eval") << c.name;
    for (int s = 0; s < kSteps && s < static_cast<int>(run.lines.size()); ++s) {
      EXPECT_NEAR(run.lines[s]["global_loss"].get<double>(), ref.lines[s]["loss"].get<double>(),
                  1e-5)
          << c.name << " step " << s + 1;
      // worker 0's own loss is half of the global batch's: not the same figure
      EXPECT_NE(run.lines[s]["global_loss"].get<double>(), run.lines[s]["loss"].get<double>());
    }
  }
}

TEST(StepLossesTraining, SspAndAspLinesCarryEveryWorkersLoss) {
  const std::string dir = testing::scratch_dir("step_losses_async");
  for (const char* consistency : {"ssp", "asp"}) {
    const Outcome run = train(backend("ps", "1", consistency), 4, dir + "/m.jsonl");
    expect_bounds(run.lines, 3, consistency);
  }
}

// Gathering the losses changes no result: the same bits with it, without it, and with no file.
TEST(StepLossesTraining, TheParametersAreTheSameBitsWithAndWithout) {
  const std::string dir = testing::scratch_dir("step_losses_bits");
  for (const auto& [cfg, world] : {std::pair{backend("ring"), 3}, std::pair{backend("ps", "2"), 5},
                                   std::pair{backend("ps", "colocated"), 3}}) {
    const Outcome all = train(cfg, world, dir + "/a.jsonl", "all");
    const Outcome w0 = train(cfg, world, dir + "/b.jsonl", "worker0");
    const Outcome none = train(cfg, world, "");
    EXPECT_EQ(testing::max_abs_diff(all.params, w0.params), 0.0) << cfg.sync.backend;
    EXPECT_EQ(testing::max_abs_diff(all.params, none.params), 0.0) << cfg.sync.backend;
    ASSERT_EQ(w0.lines.size(), static_cast<std::size_t>(kSteps));
    EXPECT_FALSE(w0.lines[0].contains("global_loss"));  // worker0: the lines as before
    EXPECT_TRUE(all.lines[0].contains("global_loss"));
    for (int s = 0; s < kSteps; ++s)
      EXPECT_EQ(all.lines[s]["loss"].get<double>(), w0.lines[s]["loss"].get<double>());
  }
}

}  // namespace
}  // namespace starring
