// Stopping on request (SIGUSR1, a batch system's preemption notice; --fault stop:RANK:STEP in
// tests): the workers agree on one step (trainer/stop_vote.h), every one of them stops after it,
// a checkpoint of that step is written, and resuming from it gives bit for bit the parameters of
// an uninterrupted run under synchronous training - on local, ring and the parameter server
// (dedicated and co-located), with the request reaching one worker only. Under ssp the lag grows
// with --staleness; under asp, without --checkpoint-dir, and when the agreed step is the last one
// a request is ignored. The metrics: a resumed run continues the stopped run's .partial file (not
// an older finished file beside it), and a failed write fails a stopped run too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "common/error.h"
#include "common/inproc_comm.h"
#include "tests/scratch_dir.h"
#include "train_fixture.h"
#include "trainer/checkpoint.h"
#include "trainer/stop_vote.h"

namespace starring {
namespace {
namespace fs = std::filesystem;

constexpr std::int64_t kSteps = 20;  // resumable_config

// The vote alone: requests from two workers at different steps (the last from step 9, worker 0
// from step 11); every worker decides on the first round at or after step 9, `lag` steps later,
// and names who had asked by then.
TEST(StopVote, EveryWorkerDecidesTheSameStep) {
  for (int world : {1, 2, 3, 5}) {
    for (int lag : {2, 4}) {
      for (int every : {1, 4}) {
        const std::int64_t round = (9 + every - 1) / every * every;  // 9, or 12 with every 4
        std::vector<int> want{world - 1};
        if (world > 1 && round >= 11) want.insert(want.begin(), 0);
        std::vector<std::int64_t> decided(world, -1);
        std::vector<std::vector<int>> by(world);
        run_ranks(
            world,
            [&](Comm& c) {
              StopVote v(c, lag, every);
              const int last = c.size() - 1;
              for (std::int64_t s = 1; s <= 40; ++s) {
                const bool mine = (c.rank() == last && s == 9) || (c.rank() == 0 && s == 11);
                if (v.after_step(s, mine)) {  // a request is remembered after its step
                  decided[c.rank()] = s;
                  by[c.rank()] = v.requested_by();
                  EXPECT_EQ(v.decided_round(), round);
                  break;
                }
              }
            },
            Seconds(10));
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(decided[r], round + lag)
              << "world " << world << " lag " << lag << " every " << every << " rank " << r;
          EXPECT_EQ(by[r], want);
        }
      }
    }
  }
}

TEST(StopVote, NoRequestNeverStopsAndDisabledNeverVotes) {
  run_ranks(3, [](Comm& c) {
    StopVote v(c, 2), off(c, -1);  // a round every kStopVoteEvery (8) steps
    EXPECT_FALSE(off.enabled());
    for (std::int64_t s = 1; s <= 30; ++s) {
      EXPECT_FALSE(v.after_step(s, false));
      EXPECT_FALSE(off.after_step(s, true));  // no messages: the others never see it
    }
    v.finish();  // the last two rounds complete on every worker
    const CommCounters k = c.counters();
    EXPECT_EQ(k.msgs_sent, 3u * 2);  // rounds 8, 16, 24: one flag to each of the 2 peers
    EXPECT_EQ(k.bytes_sent, 3u * 2);
  });
}

// A request the run cannot honour is said once, at the step it came, with the reason (a
// --fault stop asks again every step: a line per step buried the run's own output).
TEST(StopVote, AnIgnoredRequestIsSaidOnce) {
  ::testing::internal::CaptureStderr();
  run_ranks(1, [](Comm& c) {
    StopVote off(c, -1, kStopVoteEvery, "no --checkpoint-dir to save the run to");
    for (std::int64_t s = 1; s <= 10; ++s) EXPECT_FALSE(off.after_step(s, s >= 4));
  });
  const std::string said = ::testing::internal::GetCapturedStderr();
  const std::string line =
      "[starring] rank 0: stop request (SIGUSR1 or --fault stop) at step 4 ignored: no "
      "--checkpoint-dir to save the run to\n";
  EXPECT_EQ(said, line);
}

TEST(StopVote, ASilentWorkerEndsTheVoteWithATimeoutNamingIt) {
  std::vector<std::string> errors(3);
  run_ranks(3, [&](Comm& c) {
    c.set_timeout(Seconds(0.5));
    StopVote v(c, 2, 1);
    try {
      for (std::int64_t s = 1; s <= 10; ++s) {
        if (c.rank() == 2 && s == 4) {  // stops voting without leaving
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          return;
        }
        v.after_step(s, false);
      }
    } catch (const TimeoutError& e) {
      errors[c.rank()] = e.what();
    }
  });
  for (int r : {0, 1}) {
    EXPECT_NE(errors[r].find("rank 2"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find(": the workers' vote on stop requests after step 4 did not complete"),
              std::string::npos)
        << errors[r];
  }
}

struct Case {
  std::string backend, servers;
  int workers;
  std::string consistency;  // ps only
  int skew;                 // the backend's max_step_skew
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.backend << " " << c.servers << " x" << c.workers << " " << c.consistency;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string s = c.backend + "_w" + std::to_string(c.workers);
  if (!c.servers.empty()) s += "_s" + c.servers + "_" + c.consistency;
  return s;
}

Config make_cfg(const Case& c) {
  Config cfg = testing::resumable_config(c.backend, c.servers);
  cfg.sync.timeout_s = 20;
  if (c.backend == "ps") {
    cfg.sync.consistency = c.consistency;
    cfg.sync.staleness = c.skew;
  }
  return cfg;
}

int world_of(const Case& c) {
  if (c.backend != "ps" || c.servers == "colocated") return c.workers;
  return c.workers + std::stoi(c.servers);
}

std::string fresh_dir(const std::string& name) { return testing::scratch_dir("stop_" + name); }

class StopOnRequest : public ::testing::TestWithParam<Case> {};

TEST_P(StopOnRequest, EveryWorkerStopsAtOneStepAndResumingChangesNoBit) {
  const Case& c = GetParam();
  const std::string name = case_name(::testing::TestParamInfo<Case>(c, 0));
  const Config base = make_cfg(c);
  const auto plain = testing::train_inproc(base, world_of(c));

  const int asker = c.workers - 1;  // the request reaches one worker only
  constexpr std::int64_t kAskAt = 6;
  Config stop = base;
  stop.ckpt.dir = fresh_dir(name);
  stop.out.metrics_file = stop.ckpt.dir + "/metrics.jsonl";
  stop.train.fault = "stop:" + std::to_string(asker) + ":" + std::to_string(kAskAt);
  const auto outs = testing::train_inproc(stop, world_of(c));
  const std::int64_t round = 8;  // the first vote after step 6 (kStopVoteEvery)
  static_assert(kStopVoteEvery == 8);
  const std::int64_t at = round + lag_for_skew(c.skew);
  for (int w = 0; w < c.workers; ++w) {
    const TrainResult& r = outs[w].result;
    EXPECT_EQ(outs[w].role, "worker");
    EXPECT_EQ(r.stopped_at_step, at) << "worker " << w;
    EXPECT_EQ(r.steps, at) << "worker " << w;
    EXPECT_EQ(r.stop_round, round);
    EXPECT_EQ(r.stop_requested_by, std::vector<int>{asker});
  }
  const std::string file = stop.ckpt.dir + "/" + checkpoint_file_name(at);
  EXPECT_EQ(outs[0].result.last_checkpoint, file);
  EXPECT_EQ(read_checkpoint(file, "test").step, at);
  EXPECT_TRUE(fs::exists(stop.out.metrics_file + ".partial")) << "a stopped run is not finished";
  EXPECT_FALSE(fs::exists(stop.out.metrics_file));

  Config resume = base;
  resume.ckpt.dir = stop.ckpt.dir;
  resume.ckpt.resume = "latest";
  resume.out.metrics_file = stop.out.metrics_file;
  const TrainResult r = testing::train_inproc(resume, world_of(c))[0].result;
  EXPECT_EQ(r.steps, kSteps);
  EXPECT_EQ(r.resumed_step, at);
  EXPECT_EQ(r.stopped_at_step, -1);
  if (c.consistency != "ssp")  // synchronous: bit for bit
    EXPECT_EQ(r.params, plain[0].result.params)
        << "max |diff| " << testing::max_abs_diff(r.params, plain[0].result.params);
  EXPECT_TRUE(fs::exists(stop.out.metrics_file));
}

INSTANTIATE_TEST_SUITE_P(Backends, StopOnRequest,
                         ::testing::Values(Case{"local", "", 1, "", 0}, Case{"ring", "", 2, "", 0},
                                           Case{"ring", "", 3, "", 0}, Case{"ps", "1", 2, "bsp", 0},
                                           Case{"ps", "2", 3, "bsp", 0},
                                           Case{"ps", "colocated", 2, "bsp", 0},
                                           Case{"ps", "1", 2, "ssp", 3}),
                         case_name);

// Requests that cannot or need not stop the run: under asp (no step to agree on), without a
// checkpoint folder (nothing to save), and one whose agreed step would be the last one anyway.
TEST(StopOnRequest, IgnoredUnderAspWithoutACheckpointFolderAndAtTheEnd) {
  Config asp = make_cfg(Case{"ps", "1", 2, "asp", 0});
  asp.ckpt.dir = fresh_dir("asp");
  asp.train.fault = "stop:0:3";
  Config nodir = make_cfg(Case{"ring", "", 2, "", 0});
  nodir.train.fault = "stop:1:3";
  Config late = nodir;  // round 16 carries the request and decides after step 18, the last
  late.ckpt.dir = fresh_dir("late");
  late.train.max_steps = 18;
  late.train.fault = "stop:0:15";
  for (const Config* cfg : {&asp, &nodir, &late}) {
    const auto outs = testing::train_inproc(*cfg, cfg->sync.backend == "ps" ? 3 : 2);
    for (int w = 0; w < 2; ++w) {
      EXPECT_EQ(outs[w].result.stopped_at_step, -1) << cfg->sync.backend << " " << cfg->train.fault;
      EXPECT_EQ(outs[w].result.steps, cfg->train.max_steps);
    }
  }
}

// The step lines of a metrics file, in order.
std::vector<std::int64_t> metric_steps(const std::string& file) {
  std::vector<std::int64_t> steps;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("event")) steps.push_back(j.at("step").get<std::int64_t>());
  }
  return steps;
}

// A finished run (its metrics file complete) is extended (--resume latest, more steps), the
// extension is stopped, and then resumed to its end: the metrics file holds every step once.
// The stopped run's lines are only in the .partial file, beside the finished run's older file:
// the resumed run must continue the newer one.
TEST(StopOnRequest, ResumingAStoppedExtensionOfAFinishedRunKeepsEveryStepsMetrics) {
  Config first = make_cfg(Case{"ring", "", 2, "", 0});
  first.train.max_steps = 12;
  first.ckpt.dir = fresh_dir("extend");
  first.out.metrics_file = first.ckpt.dir + "/metrics.jsonl";
  testing::train_inproc(first, 2);
  ASSERT_EQ(metric_steps(first.out.metrics_file).size(), 12u);

  Config more = first;
  more.train.max_steps = kSteps;
  more.ckpt.resume = "latest";
  Config stop = more;
  stop.train.fault = "stop:1:13";  // round 16, stops after step 18
  EXPECT_EQ(testing::train_inproc(stop, 2)[0].result.stopped_at_step, 18);
  testing::train_inproc(more, 2);
  std::vector<std::int64_t> want(kSteps);
  std::iota(want.begin(), want.end(), 1);
  EXPECT_EQ(metric_steps(first.out.metrics_file), want);
}

// A metrics file that could not be written (a full disk) fails a stopped run as it fails a
// finished one: the lines a resumed run would continue are lost, the job must not look resumable.
TEST(StopOnRequest, AFailedMetricsFileIsReportedByAStoppedRun) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  Config cfg = make_cfg(Case{"ring", "", 2, "", 0});
  cfg.ckpt.dir = fresh_dir("full");
  cfg.out.metrics_file = cfg.ckpt.dir + "/metrics.jsonl";
  fs::create_symlink("/dev/full", cfg.out.metrics_file + ".partial");  // every write: ENOSPC
  cfg.train.fault = "stop:1:1";
  ::testing::internal::CaptureStderr();
  const auto outs = testing::train_inproc(cfg, 2);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(outs[0].result.stopped_at_step, 10);
  EXPECT_NE(outs[0].result.output_error.find("No space left on device"), std::string::npos)
      << outs[0].result.output_error;
}

}  // namespace
}  // namespace starring

namespace starring {
namespace {

// 3 workers of batch 16 on 256 samples: 5 steps per epoch, so a request at step 5 (round 8) stops
// after step 10, the end of epoch 2. That epoch is evaluated before the checkpoint (the resumed
// run starts epoch 3 and would never evaluate it): the runs evaluate every epoch once. The
// resumed run is stopped again inside epoch 4 (a request at step 13: round 16, after step 18),
// and the third run's history - the summary's - lists every epoch of the job once, with the
// values of an uninterrupted run (bit for bit: synchronous training; the training loss of the
// epoch split between runs up to rounding) and one clock across the runs.
TEST(StopOnRequest, AStopAtAnEpochsEndEvaluatesThatEpochAndTheHistoryCoversEveryRun) {
  Config cfg = make_cfg(Case{"ring", "", 3, "", 0});
  cfg.train.eval_each_epoch = true;
  const TrainResult plain = testing::train_inproc(cfg, 3)[0].result;
  cfg.ckpt.dir = fresh_dir("epoch_end");
  Config stop = cfg;
  stop.train.fault = "stop:2:5";
  const TrainResult stopped = testing::train_inproc(stop, 3)[0].result;
  ASSERT_EQ(stopped.stopped_at_step, 10);
  auto epochs_of = [](const TrainResult& r) {
    std::vector<int> e;
    for (const auto& h : r.history) e.push_back(h.epoch);
    return e;
  };
  EXPECT_EQ(epochs_of(stopped), (std::vector<int>{1, 2}));
  EXPECT_EQ(stopped.legs, 1);
  stop.ckpt.resume = "latest";
  stop.train.fault = "stop:0:13";
  const TrainResult second = testing::train_inproc(stop, 3)[0].result;
  ASSERT_EQ(second.stopped_at_step, 18);
  EXPECT_EQ(epochs_of(second), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(second.legs, 2);
  EXPECT_EQ(second.earlier_epochs, 2u);
  cfg.ckpt.resume = "latest";
  const TrainResult last = testing::train_inproc(cfg, 3)[0].result;
  EXPECT_EQ(last.legs, 3);
  EXPECT_EQ(last.resumed_step, 18);
  EXPECT_EQ(last.earlier_epochs, 3u);
  ASSERT_EQ(epochs_of(last), epochs_of(plain));
  ASSERT_EQ(epochs_of(plain), (std::vector<int>{1, 2, 3, 4}));
  const std::int64_t steps[] = {5, 10, 15, 20};
  for (std::size_t e = 0; e < plain.history.size(); ++e) {
    const EpochRecord &a = plain.history[e], &b = last.history[e];
    EXPECT_EQ(b.step, steps[e]);
    EXPECT_EQ(b.step, a.step);
    if (a.epoch != 4)  // not split between runs
      EXPECT_EQ(b.train_loss, a.train_loss) << "epoch " << a.epoch;
    else  // its loss so far is carried as the workers' mean sum: the last bits may differ
      EXPECT_NEAR(b.train_loss, a.train_loss, 1e-9);
    EXPECT_EQ(b.test_accuracy, a.test_accuracy) << "epoch " << a.epoch;
    EXPECT_EQ(b.test_loss, a.test_loss) << "epoch " << a.epoch;
    if (e > 0) EXPECT_GT(b.wall_s, last.history[e - 1].wall_s) << "one clock across the runs";
  }
  // The earlier runs' entries are theirs, as they recorded them; the history's clock goes on from
  // the checkpoint's worker 0 time (the second run's training up to step 18, after the first's up
  // to step 10); the job's train_s adds each run's slowest worker's, one figure per run.
  EXPECT_EQ(last.history[0].wall_s, stopped.history[0].wall_s);
  EXPECT_EQ(last.history[2].wall_s, second.history[2].wall_s);
  EXPECT_GT(last.earlier_worker0_train_s, second.history[2].wall_s);
  EXPECT_LT(last.earlier_worker0_train_s, last.history[3].wall_s);
  EXPECT_GE(last.earlier_train_s, last.earlier_worker0_train_s);
  ASSERT_EQ(last.earlier_leg_train_s.size(), 2u);
  EXPECT_EQ(last.earlier_leg_train_s[0] + last.earlier_leg_train_s[1], last.earlier_train_s);
  EXPECT_EQ(last.test_accuracy, plain.test_accuracy);
  EXPECT_EQ(last.params, plain.params);
}

}  // namespace
}  // namespace starring
