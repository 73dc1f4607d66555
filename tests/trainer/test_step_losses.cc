// Every worker's loss in worker 0's metrics lines (trainer/step_losses.h, --metrics-loss all):
//  - StepLosses alone, losses a closed-form function of (worker, step): global_loss, loss_min,
//    loss_max and loss_max_worker exact, for 1..4 workers, lines in step order; under asp
//    (no lag) lines wait for the drain; a silent worker ends the wait with a TimeoutError naming it
//    and the step, within --timeout; a loss message of another size is an error; a run that
//    unwinds with a loss on its way waits for that send (bounded), and keeps the buffer of one
//    that never finishes.
//  - Training on the ring and the parameter server (bsp, co-located, ssp, asp): the line's
//    global_loss of every step is one worker's loss on the global batch (bsp, within float
//    reassociation), between loss_min and loss_max, and the parameters are the same bits with
//    --metrics-loss all, worker0 and no metrics file.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/gradient_sync.h"
#include "common/inproc_comm.h"
#include "tests/ps/forwarding_comm.h"
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

// Worker 0's metrics file `path` holds one line for each of steps 1..`steps`, in order, whose
// global_loss is exactly global(step).
void expect_global_losses(const std::string& path, int steps,
                          const std::function<double(int)>& global) {
  const auto lines = step_lines(path);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(steps)) << path;
  for (int s = 1; s <= steps; ++s) {
    EXPECT_EQ(lines[s - 1]["step"], s);
    EXPECT_EQ(lines[s - 1]["global_loss"].get<double>(), global(s)) << "step " << s;
  }
}

// Worker 0's line of step s (the trainer adds the rest of its fields).
MetricsLine line_of(std::int64_t s) {
  MetricsLine l;
  l.add_int("step", s);
  return l;
}

// Runs `steps` steps of StepLosses on `workers` in-process workers; worker 0 writes `path`.
void gather(int workers, int steps, int lag, const std::string& path) {
  run_ranks(workers, [&](Comm& c) {
    MetricsWriter m(c.rank() == 0 ? path : "");
    StepLosses sl(c, m, true, lag);
    for (int s = 1; s <= steps; ++s) {
      MetricsLine line;
      if (c.rank() == 0) {
        line = line_of(s);
        line.add("loss", loss_of(0, s));
      }
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
      MetricsLine line;
      if (c.rank() == 0) line = line_of(1);
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
      for (int s = 1; s <= 6; ++s) sl.after_step(s, 1.0, line_of(s));
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
  expect_global_losses(path, 6, [](int) { return 2.0; });
}

// Worker 0's receives, with every test() counted (a poll: MPI progress on the compute thread).
class CountingComm : public ps::ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    return std::make_unique<ps::HookedRecv>(
        inner().irecv(buf, bytes, peer, tag), [this] { ++tests; }, nullptr);
  }
  int tests = 0;
};

// With a lag, worker 0 does not poll the receives before a line is `lag` steps old: it waits for
// them then (the losses are there under synchronous training). Polled after every step, they
// took 1-2.3 ms of worker 0's step at np 4 on 2 cores (MPI progress beside the backend's thread).
// Here worker 1's losses of every step are in before worker 0's first step: lines still come
// exactly `lag` steps late, with the right values.
TEST(StepLosses, WithALagReceivesAreNotPolledBeforeTheLineIsDue) {
  const std::string path = testing::scratch_dir("step_losses_no_poll") + "/m.jsonl";
  InProcWorld world(2);
  CountingComm c0(world.comm(0));
  std::thread w1([&] {
    Comm& c = *world.comm(1);
    MetricsWriter m("");
    StepLosses sl(c, m, true, 2);
    for (int s = 1; s <= 6; ++s) sl.after_step(s, loss_of(1, s), nullptr);
    c.send("go", 2, 0, 5, c.timeout());
    c.barrier(c.timeout());
    sl.drain();
  });
  {
    MetricsWriter m(path);
    StepLosses sl(c0, m, true, 2);
    char go[2];
    c0.recv(go, 2, 1, 5, c0.timeout());
    for (int s = 1; s <= 6; ++s) {
      sl.after_step(s, loss_of(0, s), line_of(s));
      EXPECT_EQ(sl.held(), static_cast<std::size_t>(std::min(s, 2))) << "after step " << s;
    }
    EXPECT_EQ(c0.tests, 0);
    c0.barrier(c0.timeout());
    sl.drain();
    m.finish();
  }
  w1.join();
  expect_global_losses(path, 6, [](int s) { return (loss_of(0, s) + loss_of(1, s)) / 2; });
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
            sl.after_step(s, 1.0, c.rank() == 0 ? line_of(s) : nullptr);
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

// A loss message of another size (another build) is an error naming the worker and the step; a
// single double (the step alone) left worker 1's loss 0 in the line.
TEST(StepLosses, ALossMessageOfAnotherSizeIsAnError) {
  const std::string path = testing::scratch_dir("step_losses_size") + "/m.jsonl";
  try {
    run_ranks(
        2,
        [&](Comm& c) {
          MetricsWriter m(c.rank() == 0 ? path : "");
          StepLosses sl(c, m, true, 2);
          if (c.rank() == 1) {
            const double step_only = 1.0;
            c.send(&step_only, sizeof step_only, 0, tags::kStepLosses, c.timeout());
            c.barrier(c.timeout());
            return;
          }
          sl.after_step(1, 1.0, line_of(1));
          c.barrier(c.timeout());
          sl.drain();
        },
        Seconds(5));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: worker 1 sent 8 bytes for its loss of step 1 "
                                         "(tag 180), expected 16"),
              std::string::npos)
        << e.what();
  }
}

// A worker's sends to worker 0, through a transport that finishes them `after` their posting
// (never, if not set). Counts the requests released unfinished; `bufs` are their buffers.
class SlowSendComm : public ps::ForwardingComm {
 public:
  SlowSendComm(std::shared_ptr<Comm> inner, std::optional<Seconds> after)
      : ForwardingComm(std::move(inner)), after_(after) {}
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    auto at = std::chrono::steady_clock::time_point::max();
    if (after_) at = std::chrono::steady_clock::now() + std::chrono::duration_cast<Dur>(*after_);
    return std::make_unique<Slow>(this, inner().isend(buf, bytes, peer, tag), at, buf);
  }
  std::atomic<int> released_unfinished{0};
  std::vector<const void*> bufs;

 private:
  using Dur = std::chrono::steady_clock::duration;
  class Slow : public Request {
   public:
    Slow(SlowSendComm* o, std::unique_ptr<Request> r, std::chrono::steady_clock::time_point at,
         const void* buf)
        : o_(o), r_(std::move(r)), at_(at), buf_(buf) {}
    ~Slow() override {
      if (done_) return;
      ++o_->released_unfinished;
      o_->bufs.push_back(buf_);
    }
    bool test() override { return done_ = std::chrono::steady_clock::now() >= at_ && r_->test(); }
    RecvStatus wait(Seconds timeout) override {
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::duration_cast<Dur>(timeout);
      std::this_thread::sleep_until(std::min(at_, deadline));
      if (!test()) throw TimeoutError("slow send: timeout");
      return r_->status();
    }
    RecvStatus status() const override { return r_->status(); }

   private:
    SlowSendComm* o_;
    std::unique_ptr<Request> r_;
    std::chrono::steady_clock::time_point at_;
    const void* buf_;
    bool done_ = false;
  };
  std::optional<Seconds> after_;
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A run that fails with a loss still on its way: the send is waited for (a transport that takes
// a moment), not released unfinished with its buffer leaked (ASan's leak report).
TEST(StepLosses, AnUnfinishedSendIsCompletedWhenTheRunUnwinds) {
  InProcWorld world(2);
  SlowSendComm c(world.comm(1), Seconds(0.05));
  MetricsWriter m("");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    StepLosses sl(c, m, true, 2);
    sl.after_step(1, 2.5, nullptr);
    throw Error("the step after failed");
  } catch (const Error&) {
  }
  EXPECT_EQ(c.released_unfinished.load(), 0);
  EXPECT_LT(since(t0), 0.9);  // the send's 50 ms, not the give-up time
}

// A peer that is gone: its sends never finish. The unwind gives up after --timeout (here 0.2 s,
// below StepLosses::kGiveUpAfter), never hangs, and the buffer stays valid: the transport may
// still read it (ASan: a use after free if it were freed).
TEST(StepLosses, ASendThatNeverFinishesIsGivenUpWithoutAHangAndItsBufferKept) {
  InProcWorld world(2);
  SlowSendComm c(world.comm(1), std::nullopt);
  c.set_timeout(Seconds(0.2));
  MetricsWriter m("");
  const auto t0 = std::chrono::steady_clock::now();
  {
    StepLosses sl(c, m, true, 2);
    sl.after_step(7, 2.5, nullptr);
  }
  EXPECT_LT(since(t0), 2.0);
  EXPECT_GE(since(t0), 0.15);
  ASSERT_EQ(c.released_unfinished.load(), 1);
  const auto* msg = static_cast<const double*>(c.bufs.at(0));
  EXPECT_EQ(msg[0], 7.0);
  EXPECT_EQ(msg[1], 2.5);
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
