// DistributedSampler: for worlds 1..8 the shards of one epoch are disjoint, cover all positions
// except the dropped remainder (fewer than world * batch), and hold the same number of batches;
// the order depends on (seed, epoch) only, and so does the remainder dropped.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "common/error.h"
#include "trainer/sampler.h"

namespace starring {
namespace {

std::vector<std::size_t> epoch_order(std::size_t n, int rank, int world, int batch,
                                     std::uint64_t seed, int epoch) {
  DistributedSampler s(n, rank, world, batch, seed);
  s.set_epoch(epoch);
  return s.indices();
}

TEST(Sampler, DisjointCoveringEqualBatchesForWorlds1To8) {
  for (std::size_t n : {std::size_t(1000), std::size_t(1003), std::size_t(64)}) {
    for (int world = 1; world <= 8; ++world) {
      const int batch = 8;
      const std::size_t per = n / (world * batch);
      for (int epoch : {0, 3}) {
        std::set<std::size_t> seen;
        for (int r = 0; r < world; ++r) {
          DistributedSampler s(n, r, world, batch, 11);
          s.set_epoch(epoch);
          ASSERT_EQ(s.batches_per_epoch(), per) << "n " << n << " world " << world;
          ASSERT_EQ(s.indices().size(), per * batch);
          for (std::size_t b = 0; b < per; ++b) {
            auto idx = s.batch(b);
            ASSERT_EQ(idx.size(), std::size_t(batch));
            ASSERT_TRUE(std::equal(idx.begin(), idx.end(), s.indices().begin() + b * batch));
            for (auto i : idx) {
              ASSERT_LT(i, n);
              ASSERT_TRUE(seen.insert(i).second) << "index " << i << " in two shards";
            }
          }
          EXPECT_THROW(s.batch(per), Error);
        }
        // Covering up to the dropped remainder.
        EXPECT_EQ(seen.size(), per * world * batch);
        EXPECT_LT(n - seen.size(), std::size_t(world * batch));
      }
    }
  }
}

TEST(Sampler, EpochsDifferSeedsDifferSameSeedSameOrder) {
  const std::size_t n = 500;
  for (int world : {1, 3, 8}) {
    for (int r = 0; r < world; ++r) {
      auto e0 = epoch_order(n, r, world, 4, 42, 0);
      EXPECT_EQ(e0, epoch_order(n, r, world, 4, 42, 0));
      EXPECT_NE(e0, epoch_order(n, r, world, 4, 42, 1));
      EXPECT_NE(e0, epoch_order(n, r, world, 4, 43, 0));
    }
  }
  // set_epoch back to an earlier epoch reproduces it (no hidden state).
  DistributedSampler s(n, 0, 2, 4, 5);
  s.set_epoch(2);
  auto e2 = s.indices();
  s.set_epoch(7);
  s.set_epoch(2);
  EXPECT_EQ(s.indices(), e2);
}

// The remainder dropped each epoch comes from the whole shuffled set, so a different one is
// dropped every epoch and over a few epochs every sample is trained on: 1003 samples over 8
// workers x 8 drop 43 an epoch, and after 20 epochs none is left unseen (the chance that one
// sample is dropped 20 times is 4e-28). Shuffling only the positions that are kept, so that the
// same last 43 samples were never drawn, passed every other test (helper q4's mutation test).
TEST(Sampler, TheDroppedRemainderChangesEveryEpoch) {
  const std::size_t n = 1003;
  const int world = 8, batch = 8;
  std::vector<bool> seen(n, false);
  std::set<std::size_t> dropped0;
  for (int epoch = 0; epoch < 20; ++epoch) {
    std::vector<bool> this_epoch(n, false);
    for (int r = 0; r < world; ++r)
      for (auto i : epoch_order(n, r, world, batch, 11, epoch)) seen[i] = this_epoch[i] = true;
    std::set<std::size_t> dropped;
    for (std::size_t i = 0; i < n; ++i)
      if (!this_epoch[i]) dropped.insert(i);
    ASSERT_EQ(dropped.size(), 43u) << "epoch " << epoch;
    if (epoch == 0) dropped0 = dropped;
    if (epoch == 1) EXPECT_NE(dropped, dropped0);
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), false), 0) << "samples never trained on";
}

// The permutation is a pinned function of (seed, epoch): these values were produced by this
// implementation (SplitMix64 + Fisher-Yates) and must not change with the compiler or library.
TEST(Sampler, OrderIsPortable) {
  auto order = epoch_order(10, 0, 1, 1, 42, 0);
  const std::vector<std::size_t> pinned{4, 5, 3, 6, 9, 8, 0, 1, 2, 7};
  EXPECT_EQ(order, pinned);
}

TEST(Sampler, ShuffleIsNotBiased) {
  // Position 0 of epoch e over many epochs: every index appears, none too often.
  const std::size_t n = 10;
  std::vector<int> first(n, 0);
  const int epochs = 2000;
  for (int e = 0; e < epochs; ++e) first[epoch_order(n, 0, 1, 1, 9, e)[0]]++;
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_GT(first[i], epochs / int(n) / 2) << i;
    EXPECT_LT(first[i], epochs / int(n) * 2) << i;
  }
}

// The smallest set that can be shuffled, two samples, is shuffled too: over 16 epochs both
// orders occur (a shuffle skipped below three samples passed every other test).
TEST(Sampler, TwoSamplesAreShuffled) {
  std::set<std::vector<std::size_t>> orders;
  for (int e = 0; e < 16; ++e) orders.insert(epoch_order(2, 0, 1, 1, 42, e));
  EXPECT_EQ(orders.size(), 2u);
}

TEST(Sampler, NoShuffleIsStrided) {
  DistributedSampler s(20, 1, 3, 2, 1, /*shuffle=*/false);
  EXPECT_EQ(s.indices(), (std::vector<std::size_t>{1, 4, 7, 10, 13, 16}));
}

TEST(Sampler, BatchLargerThanShardGivesNoBatches) {
  DistributedSampler s(100, 0, 4, 32, 1);
  EXPECT_EQ(s.batches_per_epoch(), 0u);
  EXPECT_TRUE(s.indices().empty());
  EXPECT_THROW(DistributedSampler(100, 4, 4, 8, 1), Error);
  EXPECT_THROW(DistributedSampler(100, 0, 4, 0, 1), ConfigError);
}

}  // namespace
}  // namespace starring
