// The learning-rate schedule (--lr, --lr-scale, --warmup-steps, --lr-schedule): the base rate is
// scaled with the number of workers (none | linear | sqrt, for the global batch that grows with
// them), reached by a linear warm-up from the one-worker rate, then held (constant) or decayed
// along half a cosine. Steps count from 1; with t = step - 1 steps done before this one, the
// conventions are Goyal et al.'s and PyTorch's: the first step runs at the one-worker rate
// (t = 0), step warmup + 1 at the scaled rate, and the cosine is PyTorch's CosineAnnealingLR
// over the steps after the warm-up (T_max = total - warmup): it would reach 0 one step after
// the last, so the last step still learns.
#include <algorithm>
#include <cmath>

#include "trainer/trainer.h"

namespace starring {

float Trainer::learning_rate(const TrainConfig& t, std::int64_t step, std::int64_t total_steps,
                             int workers) {
  double scale = 1.0;
  if (t.lr_scale == "linear") scale = workers;
  if (t.lr_scale == "sqrt") scale = std::sqrt(static_cast<double>(workers));
  const double target = t.lr * scale;
  const std::int64_t done = std::max<std::int64_t>(step - 1, 0);
  if (done < t.warmup_steps) {
    const double f = static_cast<double>(done) / t.warmup_steps;
    return static_cast<float>(t.lr + (target - t.lr) * f);
  }
  if (t.lr_schedule == "cosine" && total_steps > t.warmup_steps) {
    const double p = static_cast<double>(done - t.warmup_steps) /
                     static_cast<double>(total_steps - t.warmup_steps);
    return static_cast<float>(target * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, p))));
  }
  return static_cast<float>(target);
}

}  // namespace starring
