// --straggler: a fixed slow worker, or one worker drawn per step (the same draw on every rank).
#include <gtest/gtest.h>

#include <vector>

#include "common/error.h"
#include "trainer/straggler.h"

namespace starring {
namespace {

TEST(Straggler, EmptySpecNeverSleeps) {
  Straggler s("", 42, 4);
  for (int step = 1; step <= 50; ++step)
    for (int r = 0; r < 4; ++r) EXPECT_EQ(s.delay_ms(r, step), 0);
}

TEST(Straggler, FixedRankSleepsEveryStep) {
  Straggler s("2:30", 42, 4);
  for (int step = 1; step <= 50; ++step) {
    EXPECT_EQ(s.delay_ms(2, step), 30);
    EXPECT_EQ(s.delay_ms(0, step), 0);
    EXPECT_EQ(s.delay_ms(3, step), 0);
  }
}

// any:MS - exactly one worker per step, the same one whoever asks, spread over all workers.
TEST(Straggler, AnyPicksOneWorkerPerStepSpreadEvenly) {
  const int workers = 4, steps = 4000;
  Straggler a("any:25", 7, workers), b("any:25", 7, workers), c("any:25", 8, workers);
  std::vector<int> slow(workers, 0);
  int differs_by_seed = 0;
  for (int step = 1; step <= steps; ++step) {
    int n = 0;
    for (int r = 0; r < workers; ++r) {
      const long ms = a.delay_ms(r, step);
      EXPECT_EQ(ms, b.delay_ms(r, step));
      EXPECT_TRUE(ms == 0 || ms == 25);
      if (ms) ++n, ++slow[r];
      if (ms != c.delay_ms(r, step)) ++differs_by_seed;
    }
    EXPECT_EQ(n, 1) << "step " << step;
  }
  for (int r = 0; r < workers; ++r) {  // expected 1000 each; 5 sigma is about 137
    EXPECT_GT(slow[r], 850) << "worker " << r;
    EXPECT_LT(slow[r], 1150) << "worker " << r;
  }
  EXPECT_GT(differs_by_seed, steps / 2);  // another seed draws other workers
}

TEST(Straggler, BadSpecsAreConfigErrors) {
  for (const char* spec : {"1", "x:5", "1:", "1:5x", "any:", "any:-3", "-1:5"})
    EXPECT_THROW(Straggler(spec, 1, 4), ConfigError) << spec;
  EXPECT_THROW(Straggler("4:10", 1, 4), ConfigError);  // only workers 0..3
}

}  // namespace
}  // namespace starring
