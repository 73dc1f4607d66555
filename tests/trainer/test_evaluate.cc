// Evaluator: the test set sharded over W workers is counted exactly once whatever W, also when W
// divides neither the test set nor the evaluation batch (10000 over 3 or 7 workers, 1001 over 7,
// more workers than samples): worker 0's count is the test set's size and its accuracy is the
// one-worker accuracy bit for bit (a count of correct answers over the same denominator); the loss
// agrees up to float reassociation, and each worker's training-loss sum is averaged over workers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/dataset.h"
#include "common/device.h"
#include "common/error.h"
#include "common/inproc_comm.h"
#include "trainer/evaluate.h"
#include "trainer/mlp.h"

namespace starring {
namespace {

constexpr int kDim = 12, kClasses = 5, kBatch = 256;  // kBatch: the trainer's eval batch floor
const std::vector<int> kWidths{kDim, 16, kClasses};
constexpr std::uint64_t kModelSeed = 3;

// The whole test set in one forward pass on one device: (correct, mean loss).
std::pair<int, double> reference(const Dataset& test) {
  auto dev = make_device("cpu", 1, 0);
  Mlp mlp(*dev, kWidths, test.n, kModelSeed);
  float* x = dev->alloc(test.x.size());
  int* y = dev->alloc_int(test.y.size());
  dev->to_device(x, test.x.data(), test.x.size());
  dev->to_device_int(y, test.y.data(), test.y.size());
  mlp.forward(x, test.n);
  const double loss = mlp.loss_and_grad(y, test.n, 0.0f);
  const int correct = mlp.count_correct(y, test.n);
  dev->free(x);
  dev->free_int(y);
  return {correct, loss};
}

class EvalSharding : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(EvalSharding, EverySampleCountedOnce) {
  const auto [n, world] = GetParam();
  const Dataset test = make_synthetic(n, kDim, kClasses, 77);
  const auto [want_correct, want_loss] = reference(test);
  if (n >= 1000) {  // an accuracy strictly between 0 and 1, so a wrong count shows in it too
    ASSERT_GT(want_correct, 0);
    ASSERT_LT(want_correct, n);
  }
  std::vector<EvalResult> got(world);
  run_ranks(world, [&](Comm& c) {
    auto dev = make_device("cpu", 1, c.rank());
    Mlp mlp(*dev, kWidths, kBatch, kModelSeed);  // every worker holds the same parameters
    Evaluator ev(mlp, c, kBatch);
    got[c.rank()] = ev.run(test, /*train_loss_sum=*/c.rank() + 1.0, /*train_steps=*/1.0);
  });
  const EvalResult& r = got[0];
  EXPECT_EQ(r.count, n) << world << " workers";
  EXPECT_EQ(r.accuracy, static_cast<double>(want_correct) / n) << world << " workers";
  EXPECT_NEAR(r.loss, want_loss, 1e-5 * std::abs(want_loss)) << world << " workers";
  EXPECT_DOUBLE_EQ(r.train_loss, (world + 1) / 2.0);  // mean of 1..world
}

INSTANTIATE_TEST_SUITE_P(TestSetsAndWorkers, EvalSharding,
                         ::testing::Values(std::pair{10000, 1}, std::pair{10000, 3},
                                           std::pair{10000, 7}, std::pair{1001, 2},
                                           std::pair{1001, 7}, std::pair{5, 7}));

// A worker that sends another number of sums (another build) is an error on worker 0 naming it,
// not a sum with values missing.
TEST(SumToWorker0, AnotherNumberOfValuesIsAnError) {
  try {
    run_ranks(
        2,
        [](Comm& c) {
          sum_to_worker0(c, std::vector<double>(c.rank() == 0 ? 5 : 3, 1.0), tags::kEvalSums);
        },
        Seconds(5));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 0: rank 1 sent 24 bytes for its 5 sums (tag 101), expected 40");
  }
}

}  // namespace
}  // namespace starring
