// The learning-rate schedule (--lr, --lr-scale, --warmup-steps, --lr-schedule): the base rate is
// scaled with the number of workers (none | linear | sqrt, for the global batch that grows with
// them), reached by a linear warm-up from the one-worker rate, then held (constant) or decayed
// to 0 at the last step along half a cosine.
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
  if (t.warmup_steps > 0 && step <= t.warmup_steps) {
    double f = static_cast<double>(step) / t.warmup_steps;
    return static_cast<float>(t.lr + (target - t.lr) * f);
  }
  if (t.lr_schedule == "cosine" && total_steps > t.warmup_steps) {
    double p = static_cast<double>(step - t.warmup_steps) / (total_steps - t.warmup_steps);
    return static_cast<float>(target * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, p))));
  }
  return static_cast<float>(target);
}

}  // namespace starring
