// Numerical edge cases of the model's math that the value tests elsewhere do not reach, each one
// a plausible small bug that left every other test passing (helper-61's mutation test of common/
// and trainer/):
//   - softmax cross-entropy with logits beyond float exp's range (|x| > 88): the loss and gradient
//     stay finite and exact only if exp is taken of x - max (a shift by 0 gave inf and NaN);
//   - AdamW with gradients of the size of eps: eps is added to sqrt(v_hat), as PyTorch does
//     (inside the square root the step of a 1e-6 gradient was 100 times too small);
//   - AdamW's decoupled decay applies to the parameter before the step, p (1 - lr wd) - step, as
//     PyTorch does ((p - step)(1 - lr wd) differs by step * lr * wd, seen only at a large lr * wd).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/device.h"
#include "common/optimizer.h"

namespace starring {
namespace {

TEST(SoftmaxXent, LogitsBeyondExpRangeGiveFiniteExactLossAndGradient) {
  auto dev = make_device("cpu", 1, 0);
  const int rows = 3, cols = 3;
  // Row 0: one huge logit, the label elsewhere (loss 1000). Row 1: the label on the huge logit
  // (loss ~0). Row 2: every logit far below -88 (exp underflows to 0 unless shifted; loss ln 2
  // + 1 for labels one apart).
  const std::vector<float> x = {1000.0f,  0.0f,     -1000.0f,  //
                                0.0f,     500.0f,   -500.0f,   //
                                -1000.0f, -1001.0f, -2000.0f};
  const std::vector<int> y = {1, 1, 1};
  float* dx = dev->alloc(x.size());
  float* dd = dev->alloc(x.size());
  int* dy = dev->alloc_int(y.size());
  dev->to_device(dx, x.data(), x.size());
  dev->to_device_int(dy, y.data(), y.size());
  const float scale = 0.5f;
  const double loss = dev->softmax_xent(dx, dy, rows, cols, dd, scale);
  std::vector<float> d(x.size());
  dev->to_host(d.data(), dd, d.size());
  dev->free(dx);
  dev->free(dd);
  dev->free_int(dy);

  // Exact references: row 0: log(1 + e^-1000 + e^-2000) + 1000 = 1000; row 1: ~e^-500 = 0;
  // row 2: log(1 + e^-1 + e^-1000) + 1.
  const double row2 = std::log(1.0 + std::exp(-1.0)) + 1.0;
  ASSERT_TRUE(std::isfinite(loss)) << loss;
  EXPECT_NEAR(loss, 1000.0 + 0.0 + row2, 1e-4);
  const double p2 = 1.0 / (1.0 + std::exp(-1.0));  // row 2's softmax of logit 0
  const std::vector<double> want = {scale * 1.0, -scale * 1.0,
                                    0.0,  //
                                    0.0,         0.0,
                                    0.0,  //
                                    scale * p2,  scale * (1 - p2 - 1),
                                    0.0};
  for (std::size_t i = 0; i < d.size(); ++i) {
    ASSERT_TRUE(std::isfinite(d[i])) << "dlogits[" << i << "] = " << d[i];
    EXPECT_NEAR(d[i], want[i], 1e-6) << "dlogits[" << i << "]";
  }
}

OptimizerConfig adamw(float weight_decay) {
  OptimizerConfig c;
  c.type = "adamw";
  c.weight_decay = weight_decay;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.eps = 1e-8f;
  return c;
}

// Step 1: m_hat = g and v_hat = g^2, so p moves by lr * g / (|g| + eps): 0.990 lr for g = 1e-6,
// 0.5 lr for g = 1e-8, 0.0099 lr for g = 1e-10 (eps inside the root: 0.0100, 0.0071, 0.0001).
TEST(AdamW, EpsIsAddedToTheRootNotUnderIt) {
  const std::vector<float> g = {1e-6f, 1e-8f, 1e-10f, -1e-6f};
  std::vector<float> p(g.size(), 0.0f);
  Optimizer opt(adamw(0.0f), 0, g.size());
  const double lr = 1e-3;
  opt.apply(p.data(), g.data(), 0, g.size(), static_cast<float>(lr), 1);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double gi = g[i];
    const double want = -lr * gi / (std::fabs(gi) + 1e-8);
    EXPECT_NEAR(p[i], want, 1e-3 * std::fabs(want)) << "g = " << gi;
  }
}

// lr 0.1, wd 0.5: decay 0.95; step 1 moves p by lr * sign(g) = 0.1. PyTorch: 1 * 0.95 - 0.1 =
// 0.85; decaying after the step would give (1 - 0.1) * 0.95 = 0.855.
TEST(AdamW, DecayAppliesToTheParameterBeforeTheStep) {
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -0.25f};
  Optimizer opt(adamw(0.5f), 0, 2);
  opt.apply(p.data(), g.data(), 0, 2, 0.1f, 1);
  EXPECT_NEAR(p[0], 1.0 * 0.95 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-6);
  EXPECT_NEAR(p[1], -2.0 * 0.95 + 0.1 * 0.25 / (0.25 + 1e-8), 1e-6);
}

}  // namespace
}  // namespace starring
