// Mlp: a multi-layer perceptron (Linear -> ReLU -> ... -> Linear) with softmax cross-entropy,
// computed on a Device. Parameters and gradients each live in ONE flat device buffer described by
// layout() (tensors in backward order: last layer's bias, last layer's weight, ..., fc1.weight),
// so a backend synchronizes a single buffer. The offsets follow that order too (fc_L.bias at
// offset 0, fc1.weight last), so consecutive tensors of the layout are one contiguous range.
// Weights are [out, in] row-major as in PyTorch. Initialisation is deterministic from the seed
// (He-uniform weights from mt19937_64, zero biases), identical on every rank and platform.
//
// The trainer drives it layer by layer so that it can hand each layer's gradients to the
// GradientSync as soon as they exist and wait for each layer's parameters just before use:
//   for l in 0..L-1:  sync.wait_params(layer tensors); forward_layer(l)
//   loss = loss_and_grad(labels, n, 1/n)
//   for l in L-1..0:  backward_layer(l, accumulate); sync.tensor_ready(...)
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/device.h"
#include "common/param_layout.h"

namespace starring {

class Mlp {
 public:
  // widths = {in, hidden..., classes}; max_batch sizes the activation buffers.
  Mlp(Device& dev, std::vector<int> widths, int max_batch, std::uint64_t seed);
  ~Mlp();
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  const ParamLayout& layout() const { return layout_; }
  std::size_t num_params() const { return layout_.total(); }
  int num_layers() const { return static_cast<int>(widths_.size()) - 1; }
  const std::vector<int>& widths() const { return widths_; }
  // Backward-order indices of layer l's tensors (weight, bias).
  std::vector<std::size_t> layer_tensors(int l) const;

  float* params() { return params_; }  // device memory
  float* grads() { return grads_; }
  Device& device() { return dev_; }

  // Input batch (device memory, n x widths[0]) for the next forward pass. Not copied: it must stay
  // valid until backward_layer(0) has run.
  void set_input(const float* x, int n);
  void forward_layer(int l);
  // Mean loss over n rows (labels: device memory, n ints); sets d(logits) scaled by grad_scale
  // (1/n for a mean loss; 0 when only the loss is wanted).
  double loss_and_grad(const int* labels, int n, float grad_scale);
  // Writes (accumulate=false) or adds (true) layer l's parameter gradients. Call for l = L-1
  // down to 0 after loss_and_grad (layer l consumes the input gradient layer l+1 produced).
  void backward_layer(int l, bool accumulate);
  int count_correct(const int* labels, int n);
  void zero_grads();

  // Whole forward (no gradient), used by evaluation.
  void forward(const float* x, int n);
  // The last forward pass's logits (device memory, n x classes).
  const float* logits() const;

  // FLOPs of one training step (forward + backward) for n samples: 6 * n * sum(in*out).
  double train_flops(int n) const;

 private:
  Device& dev_;
  std::vector<int> widths_;
  int max_batch_;
  ParamLayout layout_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::vector<std::size_t> w_off_, b_off_;  // per layer, in the flat buffer
  std::vector<float*> acts_;                // acts_[0] = input, acts_[l+1] = output of layer l
  std::vector<float*> dacts_;               // gradient w.r.t. acts_[l]
  int n_ = 0;

  void init_params(std::uint64_t seed);
};

}  // namespace starring
