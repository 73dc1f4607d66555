// The optimizer math, written once and shared: a ring worker applies it to the whole averaged
// buffer, a parameter server applies it to its shard. It works on any slice [begin, end) of the
// flat buffer and keeps its state (momentum / Adam moments) for that slice only, so applying it
// slice by slice gives bit-for-bit the same result as applying it to the whole buffer.
//
// The update is purely element-wise: every per-step scalar (bias corrections, decay factors) is
// computed once from (config, lr, step) in OptimizerScalars, and element i's new value depends
// only on element i's parameter, gradient and state. No reductions cross elements.
//   sgd:   g' = g + wd * p;  m = momentum * m + g';  p = p - lr * m      (PyTorch SGD, dampening 0)
//   adamw: p = p * (1 - lr * wd);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//          p = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc_k = 1 - b_k^step (PyTorch
//          AdamW)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace starring {

struct OptimizerConfig {
  std::string type = "sgd";  // "sgd" (with momentum; no Nesterov variant) or "adamw"
  float momentum = 0.9f;
  float weight_decay = 0.0f;  // sgd: L2 added to the gradient; adamw: decoupled
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// The per-step constants of one update, shared by the CPU loop and the GPU kernels.
struct OptimizerScalars {
  bool adamw = false;
  float lr = 0, momentum = 0, weight_decay = 0;  // sgd
  float decay = 1;                               // adamw: 1 - lr * wd
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float step_size = 0;     // adamw: lr / bc1
  float inv_sqrt_bc2 = 1;  // adamw: 1 / sqrt(bc2)
  float eps = 0;
};
// Validates cfg.type and step (>= 1) and computes the constants; throws Error on bad input.
OptimizerScalars optimizer_scalars(const OptimizerConfig& cfg, float lr, std::int64_t step);

// The element-wise update on n contiguous elements (host memory); s1/s2 are the state for these
// same elements (s2 unused by sgd).
void optimizer_update(const OptimizerScalars& k, float* params, const float* grads, float* s1,
                      float* s2, std::size_t n);

class Optimizer {
 public:
  // Owns state for elements [begin, end) of the flat buffer.
  Optimizer(const OptimizerConfig& cfg, std::size_t begin, std::size_t end);

  // Applies one step to params[i], grads[i] for i in [lo, hi) (absolute indices, must lie within
  // [begin, end)). `params`/`grads` point at element 0 of the flat buffer. `step` counts from 1
  // (Adam bias correction). Different sub-ranges of one step may be applied in any order.
  void apply(float* params, const float* grads, std::size_t lo, std::size_t hi, float lr,
             std::int64_t step);

  std::size_t begin() const { return begin_; }
  std::size_t end() const { return end_; }
  const OptimizerConfig& config() const { return cfg_; }
  // State, for checkpoints and for GPU backends that keep it on the device.
  std::vector<float>& state1() { return s1_; }
  std::vector<float>& state2() { return s2_; }

 private:
  OptimizerConfig cfg_;
  std::size_t begin_, end_;
  std::vector<float> s1_, s2_;  // momentum, or Adam m and v
};

}  // namespace starring
