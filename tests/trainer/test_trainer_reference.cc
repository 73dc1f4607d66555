// The trainer against a training loop written out by hand from its parts (Mlp, DistributedSampler,
// Optimizer): one worker on the local backend, three epochs, with and without gradient
// accumulation, must give the same parameters and the same last-epoch training loss. The loop's
// own bookkeeping is what this holds: a new permutation every epoch (set_epoch(epoch)), the
// micro-batches s * accum + m of step s, the gradient scale 1 / (batch * accum), and the step's
// loss as the mean over its micro-batches. Each was a small bug that every other test let pass
// (helper-61's mutation test): set_epoch(0) every epoch trained on one order throughout, and a
// loss summed over the micro-batches reported accum times the loss. Tolerance: the same
// operations on the same device in the same order (the local backend applies the optimizer per
// tensor, slice for slice the same math): 1e-6, far below the 1e-3 a different batch order moves.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/optimizer.h"
#include "train_fixture.h"
#include "trainer/mlp.h"
#include "trainer/sampler.h"

namespace starring {
namespace {

struct Reference {
  std::vector<float> params;
  double last_epoch_loss = 0;  // mean step loss over the last epoch
};

Reference hand_written_loop(const Config& cfg, const Dataset& train) {
  const TrainConfig& t = cfg.train;
  auto dev = make_device("cpu", 1, 0);
  std::vector<int> widths{train.dim};
  widths.insert(widths.end(), cfg.model.hidden.begin(), cfg.model.hidden.end());
  widths.push_back(train.classes);
  Mlp mlp(*dev, widths, t.batch, t.seed);
  DistributedSampler sampler(train.n, 0, 1, t.batch, t.seed);
  Optimizer opt(t.opt, 0, mlp.num_params());
  const std::int64_t steps_per_epoch =
      static_cast<std::int64_t>(sampler.batches_per_epoch()) / t.accum;
  std::vector<float> x(static_cast<std::size_t>(t.batch) * train.dim);
  std::vector<int> y(t.batch);
  Reference ref;
  std::int64_t step = 0;
  for (int epoch = 0; epoch < t.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    double epoch_loss = 0;
    for (std::int64_t s = 0; s < steps_per_epoch; ++s) {
      ++step;
      double loss = 0;
      for (int m = 0; m < t.accum; ++m) {
        const auto idx = sampler.batch(static_cast<std::size_t>(s) * t.accum + m);
        for (std::size_t i = 0; i < idx.size(); ++i) {
          std::copy_n(train.x.data() + idx[i] * train.dim, train.dim, x.data() + i * train.dim);
          y[i] = train.y[idx[i]];
        }
        mlp.forward(x.data(), t.batch);  // CPU device: host memory
        loss += mlp.loss_and_grad(y.data(), t.batch, 1.0f / (t.batch * t.accum)) / t.accum;
        for (int l = mlp.num_layers() - 1; l >= 0; --l) mlp.backward_layer(l, m > 0);
      }
      opt.apply(mlp.params(), mlp.grads(), 0, mlp.num_params(), t.lr, step);
      epoch_loss += loss;
    }
    ref.last_epoch_loss = epoch_loss / static_cast<double>(steps_per_epoch);
  }
  ref.params.assign(mlp.params(), mlp.params() + mlp.num_params());
  return ref;
}

class TrainerReference : public ::testing::TestWithParam<int> {};  // accum

TEST_P(TrainerReference, SameParametersAndLossAsTheLoopWrittenOut) {
  Config cfg = testing::small_config();
  cfg.data.synthetic_train = 96;  // batch 16: 6 batches an epoch, 3 or 6 steps
  cfg.train.epochs = 3;
  cfg.train.accum = GetParam();
  cfg.train.opt.weight_decay = 1e-3f;
  const auto data = load_data(cfg);
  const Reference ref = hand_written_loop(cfg, data.first);
  const TrainResult r = testing::train_inproc(cfg, 1)[0].result;
  EXPECT_EQ(r.steps, 3 * 6 / cfg.train.accum);
  ASSERT_EQ(r.params.size(), ref.params.size());
  EXPECT_LT(testing::max_abs_diff(r.params, ref.params), 1e-6);
  EXPECT_NEAR(r.final_train_loss, ref.last_epoch_loss, 1e-6 * ref.last_epoch_loss);
  // Not vacuous: the parameters moved from their initial values by far more than the tolerance.
  auto dev = make_device("cpu", 1, 0);
  Mlp init(*dev, r.widths, 1, cfg.train.seed);
  const std::vector<float> p0(init.params(), init.params() + init.num_params());
  EXPECT_GT(testing::max_abs_diff(r.params, p0), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Accum, TrainerReference, ::testing::Values(1, 2));

}  // namespace
}  // namespace starring
