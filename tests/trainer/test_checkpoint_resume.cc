// The property that makes checkpoints trustworthy: K steps straight through give bit for bit the
// same parameters as stopping at a checkpoint and resuming in a FRESH trainer (new model, new
// sync, new servers) - for local, ring, and the parameter server under bsp (dedicated servers and
// co-located), with sgd-momentum and adamw, across epoch boundaries, with warm-up and a cosine
// schedule (the step, the sampler epoch and the position inside it all continue), and with
// micro-batches (--accum 2: the position counts optimizer steps of two micro-batches each). Writing
// checkpoints does not change the result either. A ring checkpoint resumed on the parameter
// server gives the ring's parameters within the cross-backend tolerance of test_equivalence.
// Also: asp/ssp checkpoints do not deadlock, the metrics file of a resumed run holds every step
// once, and a checkpoint that does not fit or is damaged stops every rank with a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/inproc_comm.h"
#include "tests/scratch_dir.h"
#include "train_fixture.h"
#include "trainer/checkpoint.h"

namespace starring {
namespace {
namespace fs = std::filesystem;

constexpr std::int64_t kSteps = 20;        // resumable_config; 2 workers: 8 steps per epoch
constexpr std::int64_t kEvery = 7;         // checkpoints at 7, 14 and 20 (the end)
constexpr double kCrossBackendTol = 1e-6;  // as test_equivalence: float reassociation only

struct Case {
  std::string backend;
  std::string servers;  // ps only
  int workers;
  std::string opt;
  int accum = 1;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.backend << " " << c.servers << " x" << c.workers << " " << c.opt << " accum " << c.accum;
}

std::string run_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& r = info.param;
  std::string s = r.backend + "_w" + std::to_string(r.workers) + "_" + r.opt;
  if (!r.servers.empty()) s += "_s" + r.servers;
  if (r.accum > 1) s += "_accum" + std::to_string(r.accum);
  return s;
}

Config make_cfg(const Case& r) {
  Config cfg = testing::resumable_config(r.backend, r.servers);
  cfg.train.opt.type = r.opt;
  cfg.train.opt.weight_decay = 0.01f;
  cfg.train.accum = r.accum;
  cfg.train.epochs *= r.accum;  // still kSteps steps: 8 / accum an epoch
  if (r.opt == "adamw") cfg.train.lr = 0.01f;
  if (r.backend == "ps") cfg.sync.bucket_mb = 0.001;  // several buckets even on a tiny model
  cfg.train.eval_each_epoch = true;                   // every epoch's training loss in the history
  return cfg;
}

int world_of(const Config& cfg, int workers) {
  if (cfg.sync.backend != "ps" || cfg.sync.servers == "colocated") return workers;
  return workers + std::stoi(cfg.sync.servers);
}

// Worker 0's outcome (workers are the first ranks).
TrainResult train(const Config& cfg, int workers) {
  auto outs = testing::train_inproc(cfg, world_of(cfg, workers));
  EXPECT_EQ(outs[0].role, "worker");
  return outs[0].result;
}

std::string fresh_dir(const std::string& name) { return testing::scratch_dir("resume_" + name); }

std::string ckpt(const std::string& dir, std::int64_t step) {
  return dir + "/" + checkpoint_file_name(step);
}

// Steps of the per-step records of a metrics file, in order.
std::vector<std::int64_t> metric_steps(const std::string& file) {
  std::vector<std::int64_t> steps;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) steps.push_back(j["step"].get<std::int64_t>());
  }
  return steps;
}

// The `lr` of each step line of a metrics file, in order.
std::vector<double> step_rates(const std::string& file) {
  std::vector<double> lr;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (auto j = nlohmann::json::parse(line); j.contains("loss")) lr.push_back(j.at("lr"));
  return lr;
}

class Resume : public ::testing::TestWithParam<Case> {};

TEST_P(Resume, StoppingAndResumingChangesNoBit) {
  const Case& r = GetParam();
  const std::string name = run_name(::testing::TestParamInfo<Case>(r, 0));
  const Config base = make_cfg(r);
  const TrainResult plain = train(base, r.workers);

  Config with = base;
  with.ckpt.dir = fresh_dir(name + "_a");
  with.ckpt.every = kEvery;
  with.ckpt.keep = 10;
  with.out.metrics_file = with.ckpt.dir + "/metrics.jsonl";
  const TrainResult full = train(with, r.workers);
  EXPECT_EQ(full.params, plain.params) << "writing checkpoints changed the training";
  // Their count and time (the summary's checkpoints, checkpoint_s), outside the training time.
  EXPECT_EQ(plain.checkpoints, 0);
  EXPECT_EQ(plain.checkpoint_s, 0);
  EXPECT_EQ(full.checkpoints, 3);
  EXPECT_GT(full.checkpoint_s, 0);
  for (std::int64_t s : {kEvery, 2 * kEvery, kSteps})
    EXPECT_TRUE(fs::exists(ckpt(with.ckpt.dir, s)));
  EXPECT_EQ(read_checkpoint(ckpt(with.ckpt.dir, kSteps), "test").params, full.params);

  Config res = base;  // a fresh trainer, sync (and servers) resume from step 7
  res.ckpt.resume = ckpt(with.ckpt.dir, kEvery);
  res.ckpt.dir = fresh_dir(name + "_b");
  res.out.metrics_file = with.out.metrics_file;
  const TrainResult resumed = train(res, r.workers);
  EXPECT_EQ(resumed.steps, kSteps);
  EXPECT_EQ(resumed.resumed_step, kEvery);
  EXPECT_EQ(resumed.resumed_from, res.ckpt.resume);
  EXPECT_EQ(resumed.checkpoints, 1);  // its own: only at the end (no every)
  EXPECT_EQ(resumed.params, full.params)
      << "max |diff| " << testing::max_abs_diff(resumed.params, full.params);
  // The epoch of step 7 began before it: its training loss (every worker's steps) carries over.
  ASSERT_EQ(resumed.history.size(), full.history.size());
  for (std::size_t e = 0; e < full.history.size(); ++e) {
    EXPECT_EQ(resumed.history[e].epoch, full.history[e].epoch);
    EXPECT_NEAR(resumed.history[e].train_loss, full.history[e].train_loss, 1e-9) << "epoch " << e;
  }
  EXPECT_EQ(read_checkpoint(ckpt(res.ckpt.dir, kSteps), "test").params, full.params);
  // The resumed run kept the first run's lines up to step 7 and appended its own.
  std::vector<std::int64_t> want(kSteps);
  for (std::int64_t s = 0; s < kSteps; ++s) want[s] = s + 1;
  EXPECT_EQ(metric_steps(res.out.metrics_file), want);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, Resume,
    ::testing::Values(Case{"local", "", 1, "sgd"}, Case{"local", "", 1, "adamw"},
                      Case{"ring", "", 2, "sgd"}, Case{"ring", "", 2, "adamw"},
                      Case{"ps", "1", 2, "sgd"}, Case{"ps", "2", 2, "adamw"},
                      Case{"ps", "colocated", 2, "sgd"}, Case{"ps", "colocated", 2, "adamw"},
                      Case{"ring", "", 2, "adamw", 2}, Case{"ps", "1", 2, "adamw", 2}),
    run_name);

// The same mathematics on another backend: a ring checkpoint resumed on the parameter server
// (and a co-located parameter-server checkpoint resumed on the ring).
TEST(ResumeAcrossBackends, RingCheckpointOnTheParameterServerAndBack) {
  for (const auto& [from, to] :
       {std::pair<Case, Case>{Case{"ring", "", 2, "adamw"}, Case{"ps", "2", 2, "adamw"}},
        {Case{"ps", "colocated", 2, "sgd"}, Case{"ring", "", 2, "sgd"}}}) {
    Config a = make_cfg(from);
    a.ckpt.dir = fresh_dir("cross_" + from.backend);
    a.ckpt.every = kEvery;
    a.ckpt.keep = 10;
    const TrainResult straight = train(a, from.workers);
    Config b = make_cfg(to);
    b.ckpt.resume = ckpt(a.ckpt.dir, kEvery);
    const TrainResult resumed = train(b, to.workers);
    EXPECT_EQ(resumed.steps, kSteps);
    const double diff = testing::max_abs_diff(resumed.params, straight.params);
    EXPECT_LT(diff, kCrossBackendTol) << from.backend << " -> " << to.backend;
    std::printf("%s -> %s: max |param difference| = %.3g\n", from.backend.c_str(),
                to.backend.c_str(), diff);
  }
}

// Another world size: 2 ring workers of batch 16 and 1 worker of batch 32 train on the same
// samples each step (test_equivalence), so the step, the epoch and the position carry over.
// With --lr-scale linear too: the rate is scaled for the checkpoint's 2 workers (the global
// batch is the same), not for this run's 1 (before: halved from the resumed step on, and the
// parameters 1e-2 apart).
TEST(ResumeAcrossBackends, TwoRingWorkersResumedOnOneWorkerOfTheSameGlobalBatch) {
  for (const std::string scale : {"none", "linear"}) {
    Config a = make_cfg(Case{"ring", "", 2, "adamw"});
    a.train.lr_scale = scale;
    a.ckpt.dir = fresh_dir("world_" + scale);
    a.ckpt.every = kEvery;
    a.ckpt.keep = 10;
    const TrainResult straight = train(a, 2);
    Config b = make_cfg(Case{"local", "", 1, "adamw"});
    b.train.lr_scale = scale;
    b.train.batch *= 2;
    b.ckpt.resume = ckpt(a.ckpt.dir, kEvery);
    b.ckpt.dir = fresh_dir("world_" + scale + "_b");
    b.ckpt.every = kEvery;
    const TrainResult resumed = train(b, 1);
    EXPECT_EQ(resumed.steps, kSteps);
    const double diff = testing::max_abs_diff(resumed.params, straight.params);
    EXPECT_LT(diff, kCrossBackendTol) << "--lr-scale " << scale;
    std::printf("ring x2 -> local x1, --lr-scale %s: max |param difference| = %.3g\n",
                scale.c_str(), diff);
    // ... and its own checkpoints keep that basis for the next resume
    auto saved = read_checkpoint(ckpt(b.ckpt.dir, 14), "test");
    EXPECT_EQ(saved.meta.value("lr_workers", 0), 2);
  }
}

// A checkpoint inside a warm-up that rises (--lr-scale linear; the cases above keep the default
// none, whose warm-up is flat): the resumed run goes on up the same ramp from the checkpoint's
// step, not from its own first step, and reaches the same bits. Checkpoint at step 7 of a 10-step
// warm-up on 2 ring workers, SGD with momentum (its update scales with the rate); every step
// line's rate is the uninterrupted run's.
TEST(ResumeMidWarmUp, TheRampGoesOnFromTheCheckpointsStep) {
  Config a = make_cfg(Case{"ring", "", 2, "sgd"});
  a.train.lr_scale = "linear";
  a.train.warmup_steps = 10;
  a.ckpt.dir = fresh_dir("warmup_a");
  a.ckpt.every = kEvery;
  a.ckpt.keep = 10;
  a.out.metrics_file = a.ckpt.dir + "/m.jsonl";
  const TrainResult straight = train(a, 2);
  const std::vector<double> want = step_rates(a.out.metrics_file);
  Config b = a;  // its metrics file too: the resumed run keeps its lines up to step 7
  b.ckpt.resume = ckpt(a.ckpt.dir, kEvery);
  b.ckpt.dir = fresh_dir("warmup_b");
  const TrainResult resumed = train(b, 2);
  EXPECT_EQ(resumed.resumed_step, kEvery);
  EXPECT_EQ(resumed.params, straight.params)
      << "max |diff| " << testing::max_abs_diff(resumed.params, straight.params);
  const std::vector<double> got = step_rates(b.out.metrics_file);
  ASSERT_EQ(want.size(), static_cast<std::size_t>(kSteps));
  EXPECT_EQ(got, want);
  EXPECT_LT(want[kEvery], want[10]);  // not vacuous: step 8 is still below the peak of step 11
}

// Under asp and ssp a checkpoint comes after every worker's flush: no deadlock, a valid file.
TEST(ResumeAsync, AspAndSspCheckpointAndResume) {
  Config cfg = make_cfg(Case{"ps", "1", 2, "sgd"});
  cfg.sync.consistency = "asp";
  cfg.ckpt.dir = fresh_dir("async");
  cfg.ckpt.every = 5;
  cfg.train.max_steps = 12;
  EXPECT_EQ(train(cfg, 2).steps, 12);
  EXPECT_EQ(read_checkpoint(ckpt(cfg.ckpt.dir, 12), "test").step, 12);
  cfg.sync.consistency = "ssp";
  cfg.sync.staleness = 1;
  cfg.ckpt.resume = "latest";
  cfg.train.max_steps = kSteps;
  const TrainResult r = train(cfg, 2);
  EXPECT_EQ(r.steps, kSteps);
  EXPECT_EQ(r.resumed_step, 12);
  EXPECT_EQ(read_checkpoint(ckpt(cfg.ckpt.dir, kSteps), "test").step, kSteps);
}

// Resuming a run that ended at an epoch's end trains nothing and reports that epoch's evaluation,
// carried in the checkpoint with the history (its training loss read 0 when checkpoints at an
// epoch's end dropped it); a checkpoint of an older build, without the history, has the epoch
// evaluated again.
TEST(ResumeFinished, AnEpochsEndKeepsItsTrainingLoss) {
  for (const Case& r : {Case{"local", "", 1, "sgd"}, Case{"ring", "", 2, "sgd"}}) {
    Config cfg = make_cfg(r);
    cfg.ckpt.dir = fresh_dir("finished_" + r.backend);
    cfg.train.max_steps = 2 * 256 / (r.workers * cfg.train.batch);  // two whole epochs
    const TrainResult done = train(cfg, r.workers);
    ASSERT_EQ(done.history.size(), 2u);
    EXPECT_GT(done.final_train_loss, 0.0);
    cfg.ckpt.resume = "latest";
    const TrainResult again = train(cfg, r.workers);
    EXPECT_EQ(again.steps, done.steps);
    EXPECT_EQ(again.resumed_step, done.steps);
    ASSERT_EQ(again.history.size(), 2u);
    EXPECT_EQ(again.earlier_epochs, 2u);
    EXPECT_EQ(again.legs, 2);
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_EQ(again.history[e].epoch, done.history[e].epoch);
      EXPECT_EQ(again.history[e].train_loss, done.history[e].train_loss) << r.backend;
      EXPECT_EQ(again.history[e].test_accuracy, done.history[e].test_accuracy) << r.backend;
    }
    EXPECT_EQ(again.final_train_loss, done.final_train_loss) << r.backend;
    EXPECT_EQ(again.test_accuracy, done.test_accuracy);
    EXPECT_EQ(again.test_loss, done.test_loss);

    // The same checkpoint as an older build wrote it: no job in its metadata.
    const std::string path = ckpt(cfg.ckpt.dir, done.steps);
    CheckpointData old = read_checkpoint(path, "test");
    old.legs = 0;
    old.train_s = 0;
    old.history.clear();
    write_file_atomically(path, encode_checkpoint(old), "test");
    const TrainResult older = train(cfg, r.workers);
    EXPECT_EQ(older.legs, 0);
    ASSERT_EQ(older.history.size(), 1u);  // evaluated again: the earlier epochs are unknown
    EXPECT_EQ(older.history[0].epoch, 2);
    EXPECT_NEAR(older.history[0].train_loss, done.history[1].train_loss, 1e-9) << r.backend;
    EXPECT_EQ(older.test_accuracy, done.test_accuracy);
  }
}

// --checkpoint-every on an epoch's last step (8: 8 steps an epoch): the checkpoint is taken after
// that epoch's evaluation, so the run resumed from it, which starts the next epoch, still lists
// every epoch once with the straight run's figures (taken before, epoch 1 was never evaluated).
TEST(ResumeFinished, ACheckpointAtAnEpochsEndHoldsItsEvaluation) {
  Config cfg = make_cfg(Case{"ring", "", 2, "sgd"});
  cfg.ckpt.dir = fresh_dir("epoch_end");
  cfg.ckpt.every = 8;
  cfg.ckpt.keep = 10;
  const TrainResult full = train(cfg, 2);
  ASSERT_EQ(full.history.size(), 3u);  // 20 steps: epochs of 8, 8 and 4
  EXPECT_EQ(read_checkpoint(ckpt(cfg.ckpt.dir, 8), "test").history.size(), 1u);
  Config res = make_cfg(Case{"ring", "", 2, "sgd"});
  res.ckpt.resume = ckpt(cfg.ckpt.dir, 8);
  const TrainResult resumed = train(res, 2);
  EXPECT_EQ(resumed.params, full.params);
  ASSERT_EQ(resumed.history.size(), full.history.size());
  for (std::size_t e = 0; e < full.history.size(); ++e) {
    EXPECT_EQ(resumed.history[e].epoch, full.history[e].epoch);
    EXPECT_EQ(resumed.history[e].test_accuracy, full.history[e].test_accuracy) << "epoch " << e;
    EXPECT_NEAR(resumed.history[e].train_loss, full.history[e].train_loss, 1e-9) << "epoch " << e;
  }
}

// Resumed with nothing left from a checkpoint inside epoch 2 (step 14; 8 steps an epoch), taken
// after epoch 1's evaluation: epoch 2 so far is evaluated, and epoch 1's record stays the earlier
// run's (it was labelled epoch 1, the epoch before, and replaced that record).
TEST(ResumeFinished, InsideAnEpochEvaluatesThatEpoch) {
  Config cfg = make_cfg(Case{"ring", "", 2, "sgd"});
  cfg.ckpt.dir = fresh_dir("inside");
  cfg.ckpt.every = kEvery;
  cfg.ckpt.keep = 10;
  const TrainResult full = train(cfg, 2);
  ASSERT_EQ(full.history.size(), 3u);
  Config again = make_cfg(Case{"ring", "", 2, "sgd"});
  again.ckpt.resume = ckpt(cfg.ckpt.dir, 2 * kEvery);
  again.train.max_steps = 2 * kEvery;
  const TrainResult r = train(again, 2);
  EXPECT_EQ(r.steps, 2 * kEvery);
  ASSERT_EQ(r.history.size(), 2u);
  EXPECT_EQ(r.earlier_epochs, 1u);
  EXPECT_EQ(r.history[0].epoch, 1);
  EXPECT_EQ(r.history[0].step, 8);
  EXPECT_EQ(r.history[0].test_accuracy, full.history[0].test_accuracy);
  EXPECT_EQ(r.history[0].wall_s, full.history[0].wall_s);
  EXPECT_EQ(r.history[1].epoch, 2);
  EXPECT_EQ(r.history[1].step, 2 * kEvery);
}

// Expects training with `cfg` to fail with an error holding every one of `parts`.
void expect_failure(const Config& cfg, int workers, std::initializer_list<std::string> parts) {
  try {
    train(cfg, workers);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// A copy of checkpoint `file` at `bad` with one bit flipped half-way through; returns `bad`.
std::string flipped_copy(const std::string& file, const std::string& bad) {
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(bad, std::ios::binary) << bytes;
  return bad;
}

TEST(ResumeErrors, AModelThatDoesNotFitOrADamagedFileStopsEveryRank) {
  Config a = make_cfg(Case{"ring", "", 2, "sgd"});
  a.ckpt.dir = fresh_dir("errors");
  a.train.max_steps = 4;
  train(a, 2);
  const std::string file = ckpt(a.ckpt.dir, 4);

  Config wider = a;
  wider.ckpt.resume = file;
  wider.model.hidden = {24, 17};
  EXPECT_THROW(train(wider, 2), ConfigError);
  expect_failure(wider, 2, {file, "does not fit", "24,17"});
  Config other_opt = a;
  other_opt.ckpt.resume = file;
  other_opt.train.opt.type = "adamw";
  expect_failure(other_opt, 2, {file, "optimizer 'sgd' in the checkpoint"});

  const std::string bad = flipped_copy(file, a.ckpt.dir + "/flipped.ckpt");
  Config flipped = a;
  flipped.ckpt.resume = bad;
  expect_failure(flipped, 2, {bad, "CRC mismatch", "rank 0"});
  // A checkpoint that cannot be written stops every rank (worker 1 learns it from worker 0).
  Config unwritable = a;
  unwritable.ckpt.dir = a.ckpt.dir + "/flipped.ckpt/sub";  // below a file
  expect_failure(unwritable, 2, {"cannot create --checkpoint-dir " + unwritable.ckpt.dir});
  Config none = a;
  none.ckpt.dir = fresh_dir("errors_none");
  none.ckpt.resume = "latest";
  expect_failure(none, 2, {"no valid checkpoint in " + none.ckpt.dir});
}

// Each rank's own error, as mpirun shows it: a rank that fails does not abort the others (as
// run_ranks does, which hid what the others would have said), so each must learn the cause.
std::vector<std::string> each_rank_error(const Config& cfg, int workers) {
  auto data = load_data(cfg);
  InProcWorld world(workers);
  std::vector<std::string> errors(static_cast<std::size_t>(workers));
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r)
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<Comm> comm = world.comm(r);
        comm->set_timeout(Seconds(cfg.sync.timeout_s));
        auto dev = make_device("cpu", 1, r);
        run_rank(cfg, comm, *dev, nullptr, &data.first, &data.second);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// Worker 0 alone reads and writes the checkpoints; when that fails, worker 1 is told why and
// fails with that line, rather than waiting for data that never comes until --timeout (a worker
// that skipped worker 0's verdict said only 'rank 1: timeout after 3.0 s in recv from rank 0').
TEST(ResumeErrors, EveryWorkerSaysWhyWorker0Failed) {
  Config a = make_cfg(Case{"ring", "", 2, "sgd"});
  a.ckpt.dir = fresh_dir("each_rank");
  a.train.max_steps = 4;
  a.sync.timeout_s = 3;  // a worker that waited would fail on it, not hang the test
  train(a, 2);
  const std::string bad = flipped_copy(ckpt(a.ckpt.dir, 4), a.ckpt.dir + "/flipped.ckpt");
  Config flipped = a;
  flipped.ckpt.resume = bad;
  auto errors = each_rank_error(flipped, 2);
  EXPECT_NE(errors[0].find("rank 0: checkpoint " + bad + ": corrupt: CRC mismatch"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("rank 1: loading the checkpoint to resume from failed on worker 0: "
                           "rank 0: checkpoint " +
                           bad + ": corrupt: CRC mismatch"),
            std::string::npos)
      << errors[1];
  // A checkpoint that cannot be written (its folder below a file).
  Config unwritable = a;
  unwritable.ckpt.dir = bad + "/sub";
  errors = each_rank_error(unwritable, 2);
  const std::string why = "cannot create --checkpoint-dir " + unwritable.ckpt.dir;
  EXPECT_NE(errors[0].find("rank 0: " + why), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 1: the checkpoint of step 4 failed on worker 0: rank 0: " + why),
            std::string::npos)
      << errors[1];
}

// The step counts optimizer steps of one global batch, so another global batch is refused rather
// than silently shortening or stretching the run and its schedule.
TEST(ResumeErrors, AnotherGlobalBatchIsRefused) {
  Config a = make_cfg(Case{"ring", "", 2, "sgd"});
  a.ckpt.dir = fresh_dir("global-batch");
  a.train.max_steps = 4;
  train(a, 2);
  Config b = make_cfg(Case{"local", "", 1, "sgd"});
  b.ckpt.resume = ckpt(a.ckpt.dir, 4);  // 1 worker x 16 against 2 x 16
  expect_failure(b, 1, {b.ckpt.resume, "global batch 32 in the checkpoint, 16 in this run"});
}

// The data order is a function of (--seed, epoch) over the training set and the checkpoint's
// position is in that order: another seed or another training-set size is refused (before, both
// resumed without a word, at a position of another order).
TEST(ResumeErrors, AnotherSeedOrTrainingSetIsRefused) {
  Config a = make_cfg(Case{"ring", "", 2, "sgd"});
  a.ckpt.dir = fresh_dir("seed-data");
  a.train.max_steps = 4;
  train(a, 2);
  Config b = a;
  b.ckpt.dir.clear();
  b.ckpt.resume = ckpt(a.ckpt.dir, 4);
  b.train.max_steps = 8;
  Config seed = b;
  seed.train.seed = a.train.seed + 1;
  expect_failure(seed, 2,
                 {b.ckpt.resume, "does not fit this run: seed 42 in the checkpoint, --seed 43"});
  Config data = b;
  data.data.synthetic_train = a.data.synthetic_train + 64;
  expect_failure(data, 2,
                 {b.ckpt.resume, "256 training samples in the checkpoint, 320 in this run"});
  EXPECT_EQ(train(b, 2).steps, 8);  // the same seed and data resume
}

}  // namespace
}  // namespace starring
