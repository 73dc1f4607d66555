// SGD with momentum and AdamW, element-wise over a slice (see optimizer.h for the formulas).
// Each loop body reads and writes element i only and uses scalars fixed for the step, so the
// compiler can vectorise it and any split of [begin, end) into slices yields identical bits:
// every element goes through the same operations whichever slice (and vector lane) holds it.
// Multiply-adds are written as explicit fma so that floating-point contraction cannot differ
// between the vectorised body and the scalar tail of a loop (the CUDA kernels use fmaf alike).
#include "common/optimizer.h"

#include <cmath>

#include "common/error.h"

namespace starring {

OptimizerScalars optimizer_scalars(const OptimizerConfig& cfg, float lr, std::int64_t step) {
  STARRING_CHECK(step >= 1, "optimizer step counts from 1, got ", step);
  OptimizerScalars k;
  k.lr = lr;
  k.weight_decay = cfg.weight_decay;
  if (cfg.type == "sgd") {
    k.momentum = cfg.momentum;
    return k;
  }
  STARRING_CHECK(cfg.type == "adamw", "unknown optimizer '", cfg.type, "' (expected sgd|adamw)");
  k.adamw = true;
  k.decay = 1.0f - lr * cfg.weight_decay;
  k.beta1 = cfg.beta1;
  k.beta2 = cfg.beta2;
  k.one_minus_beta1 = 1.0f - cfg.beta1;
  k.one_minus_beta2 = 1.0f - cfg.beta2;
  double t = static_cast<double>(step);
  double bc1 = 1.0 - std::pow(static_cast<double>(cfg.beta1), t);
  double bc2 = 1.0 - std::pow(static_cast<double>(cfg.beta2), t);
  k.step_size = static_cast<float>(lr / bc1);
  k.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  k.eps = cfg.eps;
  return k;
}

static void sgd_update(const OptimizerScalars& k, float* __restrict p, const float* __restrict g,
                       float* __restrict m, std::size_t n) {
  const float lr = k.lr, mu = k.momentum, wd = k.weight_decay;
  for (std::size_t i = 0; i < n; ++i) {
    float gi = std::fma(wd, p[i], g[i]);
    float mi = std::fma(mu, m[i], gi);
    m[i] = mi;
    p[i] = std::fma(-lr, mi, p[i]);
  }
}

// starring_common is compiled with -fno-math-errno: otherwise GCC keeps a branch to the libm
// call around every sqrt (for errno) and will not vectorise this loop.
static void adamw_update(const OptimizerScalars& k, float* __restrict p, const float* __restrict g,
                         float* __restrict m, float* __restrict v, std::size_t n) {
  const float decay = k.decay, b1 = k.beta1, c1 = k.one_minus_beta1, b2 = k.beta2,
              c2 = k.one_minus_beta2, step_size = k.step_size, inv_bc2 = k.inv_sqrt_bc2,
              eps = k.eps;
  for (std::size_t i = 0; i < n; ++i) {
    float gi = g[i];
    float mi = std::fma(b1, m[i], c1 * gi);
    float vi = std::fma(b2, v[i], c2 * (gi * gi));
    m[i] = mi;
    v[i] = vi;
    float denom = std::fma(std::sqrt(vi), inv_bc2, eps);
    p[i] = std::fma(p[i], decay, -(step_size * (mi / denom)));
  }
}

void optimizer_update(const OptimizerScalars& k, float* params, const float* grads, float* s1,
                      float* s2, std::size_t n) {
  if (k.adamw)
    adamw_update(k, params, grads, s1, s2, n);
  else
    sgd_update(k, params, grads, s1, n);
}

Optimizer::Optimizer(const OptimizerConfig& cfg, std::size_t begin, std::size_t end)
    : cfg_(cfg), begin_(begin), end_(end) {
  STARRING_CHECK(begin <= end, "Optimizer: slice begin ", begin, " is after end ", end);
  STARRING_CHECK(cfg.type == "sgd" || cfg.type == "adamw", "unknown optimizer '", cfg.type,
                 "' (expected sgd|adamw)");
  s1_.assign(end - begin, 0.0f);
  if (cfg.type == "adamw") s2_.assign(end - begin, 0.0f);
}

void Optimizer::apply(float* params, const float* grads, std::size_t lo, std::size_t hi, float lr,
                      std::int64_t step) {
  STARRING_CHECK(begin_ <= lo && lo <= hi && hi <= end_, "Optimizer::apply: range [", lo, ", ", hi,
                 ") is outside this optimizer's slice [", begin_, ", ", end_, ")");
  if (lo == hi) return;
  OptimizerScalars k = optimizer_scalars(cfg_, lr, step);
  std::size_t off = lo - begin_;
  float* s2 = s2_.empty() ? nullptr : s2_.data() + off;
  optimizer_update(k, params + lo, grads + lo, s1_.data() + off, s2, hi - lo);
}

}  // namespace starring
