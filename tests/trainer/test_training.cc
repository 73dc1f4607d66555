// End-to-end training on a small synthetic set with the local backend, and the learning-rate rule.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "train_fixture.h"
#include "trainer/trainer.h"

namespace starring {
namespace {

TEST(Training, SyntheticLossFallsAndAccuracyRises) {
  Config cfg = testing::small_config();
  cfg.train.epochs = 5;
  cfg.train.eval_each_epoch = true;
  auto outs = testing::train_inproc(cfg, 1);
  const TrainResult& r = outs[0].result;
  ASSERT_EQ(r.history.size(), 5u);
  // Four Gaussian classes in 32 dimensions are separable: chance is 0.25 accuracy and a loss
  // of ln 4 = 1.386. After five epochs the MLP must be far past both.
  EXPECT_LT(r.final_train_loss, 0.3);
  EXPECT_GT(r.test_accuracy, 0.9);
  EXPECT_LT(r.history.back().train_loss, r.history.front().train_loss);
  EXPECT_EQ(r.steps, 5 * (1024 / 16));
}

TEST(Training, AccumulationMatchesLargerBatch) {
  // accum k with batch b is the same mathematics as batch k*b (up to float reassociation).
  Config a = testing::small_config();
  a.train.max_steps = 12;
  a.train.batch = 32;
  Config b = a;
  b.train.batch = 16;
  b.train.accum = 2;
  auto ra = testing::train_inproc(a, 1)[0].result;
  auto rb = testing::train_inproc(b, 1)[0].result;
  ASSERT_EQ(ra.params.size(), rb.params.size());
  EXPECT_LT(testing::max_abs_diff(ra.params, rb.params), 1e-4);
}

TEST(Training, LearningRateScalingAndWarmup) {
  TrainConfig t;
  t.lr = 0.1f;
  t.lr_scale = "linear";
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 1, 100, 4), 0.4f);
  t.lr_scale = "sqrt";
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 1, 100, 4), 0.2f);
  t.lr_scale = "none";
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 1, 100, 4), 0.1f);
  // Warm-up over 10 steps (steps count from 1): step 1 at the one-worker rate, step 11 at the
  // scaled one, linear in between (Goyal et al.).
  t.lr_scale = "linear";
  t.warmup_steps = 10;
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 1, 100, 4), 0.1f);
  EXPECT_NEAR(Trainer::learning_rate(t, 6, 100, 4), 0.1 + 0.3 * 0.5, 1e-6);
  EXPECT_NEAR(Trainer::learning_rate(t, 10, 100, 4), 0.1 + 0.3 * 0.9, 1e-6);
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 11, 100, 4), 0.4f);
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 50, 100, 4), 0.4f);
}

// The scale counts workers only, not --accum micro-batches (docs/REFERENCE.md: --lr is given for
// one worker's batch * accum), and with --lr-scale none a warm-up (allowed from a config file,
// where it is only a note) rises from --lr to the same --lr: the rate is flat. Scaling by workers *
// accum, or warming none up to the linear rate, passed every other test.
TEST(Training, LearningRateScaleIgnoresAccumAndNoneStaysFlat) {
  TrainConfig t;
  t.lr = 0.1f;
  t.accum = 2;
  t.lr_scale = "linear";
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 1, 100, 4), 0.4f);
  t.lr_scale = "sqrt";
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 1, 100, 4), 0.2f);
  t.lr_scale = "none";
  t.warmup_steps = 10;
  for (int s : {1, 5, 10, 11, 50})
    EXPECT_FLOAT_EQ(Trainer::learning_rate(t, s, 100, 4), 0.1f) << "step " << s;
}

// Cosine after the warm-up, as PyTorch's CosineAnnealingLR with T_max = total - warmup steps:
// lr(t) = target * (1 + cos(pi * (t - warmup) / T_max)) / 2 for t = step - 1; the last step
// still learns (lr > 0), the half-way step runs at half the rate, and it never rises.
TEST(Training, CosineScheduleFollowsPytorch) {
  TrainConfig t;
  t.lr = 0.1f;
  t.lr_scale = "linear";
  t.lr_schedule = "cosine";
  t.warmup_steps = 10;
  const int total = 110, workers = 2;
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 1, total, workers), 0.1f);
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 11, total, workers), 0.2f);   // the peak
  EXPECT_NEAR(Trainer::learning_rate(t, 61, total, workers), 0.1, 1e-7);  // half-way
  const double last = 0.2 * 0.5 * (1 + std::cos(M_PI * 99 / 100));
  EXPECT_NEAR(Trainer::learning_rate(t, total, total, workers), last, 1e-9);
  EXPECT_GT(Trainer::learning_rate(t, total, total, workers), 0.0f);
  for (int s = 12; s <= total; ++s)
    EXPECT_LE(Trainer::learning_rate(t, s, total, workers),
              Trainer::learning_rate(t, s - 1, total, workers))
        << "step " << s;
  t.warmup_steps = 0;  // no warm-up: the first step at the peak, then the same cosine
  EXPECT_FLOAT_EQ(Trainer::learning_rate(t, 1, total, workers), 0.2f);
  EXPECT_NEAR(Trainer::learning_rate(t, 56, total, workers), 0.1, 1e-7);  // half-way (t = 55)
  EXPECT_NEAR(Trainer::learning_rate(t, total, total, workers),
              0.2 * 0.5 * (1 + std::cos(M_PI * 109 / 110)), 1e-9);
}

TEST(Training, BatchLargerThanShardIsAClearError) {
  Config cfg = testing::small_config();
  cfg.train.batch = 4096;
  try {
    testing::train_inproc(cfg, 1);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than this worker's shard"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace starring
