// The optimizer math, written once and shared: a ring worker applies it to the whole averaged
// buffer, a parameter server applies it to its shard. It works on any slice [begin, end) of the
// flat buffer and keeps its state (momentum / Adam moments) for that slice only, so applying it
// slice by slice gives bit-for-bit the same result as applying it to the whole buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace starring {

struct OptimizerConfig {
  std::string type = "sgd";  // "sgd" (momentum, optional nesterov=false) or "adamw"
  float momentum = 0.9f;
  float weight_decay = 0.0f; // sgd: L2 added to the gradient; adamw: decoupled
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

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
