// Mlp on a Device: Linear -> ReLU -> ... -> Linear, softmax cross-entropy.
// Weights are stored PyTorch-style as [out, in] row-major, so layer l computes
//   Y = X W^T + b          (gemm no-trans x trans, then bias+ReLU fused in one pass)
// and its backward, given dY (already masked by the ReLU of this layer's output), is
//   dW = dY^T X,  db = sum_rows dY,  dX = dY W     (dX skipped for the first layer).
// The flat buffers are laid out in backward order (last layer's bias at offset 0), so a bucket
// of consecutive tensors in that order is one contiguous range of memory.
#include "trainer/mlp.h"

#include <cmath>
#include <random>
#include <string>

#include "common/error.h"
#include "common/kept_memory.h"

namespace starring {

Mlp::Mlp(Device& dev, std::vector<int> widths, int max_batch, std::uint64_t seed)
    : dev_(dev), widths_(std::move(widths)), max_batch_(max_batch) {
  STARRING_CONFIG_CHECK(widths_.size() >= 2, "MLP needs at least an input and an output width");
  for (int w : widths_) STARRING_CONFIG_CHECK(w > 0, "MLP widths must be positive, got ", w);
  STARRING_CONFIG_CHECK(max_batch_ > 0, "MLP batch must be positive, got ", max_batch_);
  const int L = num_layers();
  w_off_.resize(L);
  b_off_.resize(L);
  for (int l = L - 1; l >= 0; --l) {
    std::string name = "fc" + std::to_string(l + 1);
    b_off_[l] = layout_.total();
    layout_.add(name + ".bias", {widths_[l + 1]});
    w_off_[l] = layout_.total();
    layout_.add(name + ".weight", {widths_[l + 1], widths_[l]});
  }
  layout_.validate();
  params_ = dev_.alloc(layout_.total());
  grads_ = dev_.alloc(layout_.total());
  acts_.assign(L + 1, nullptr);
  dacts_.assign(L + 1, nullptr);
  for (int l = 1; l <= L; ++l) {
    acts_[l] = dev_.alloc(static_cast<std::size_t>(max_batch_) * widths_[l]);
    dacts_[l] = dev_.alloc(static_cast<std::size_t>(max_batch_) * widths_[l]);
  }
  init_params(seed);
}

Mlp::~Mlp() {
  for (int l = 1; l <= num_layers(); ++l) {  // acts_[0] is the caller's input
    dev_.free(acts_[l]);
    dev_.free(dacts_[l]);
  }
  // The backends receive into these (the ring reduces the gradients in place, a parameter
  // server's replies land in the parameters): what a receive let go unfinished may still write
  // into is kept, not freed (common/kept_memory.h).
  const std::size_t bytes = layout_.total() * sizeof(float);
  if (!keep_if_left_to_mpi(params_, bytes)) dev_.free(params_);
  if (!keep_if_left_to_mpi(grads_, bytes)) dev_.free(grads_);
}

// He-uniform: W ~ U(-b, b), b = sqrt(6 / fan_in); biases 0. The generator is mt19937_64 (its
// output sequence is fixed by the standard) and the mapping to [0, 1) uses its top 24 bits, so
// the values are the same with every compiler and standard library. Layers are filled in
// forward order, each weight row-major, independent of the buffer layout.
void Mlp::init_params(std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> host(layout_.total(), 0.0f);
  for (int l = 0; l < num_layers(); ++l) {
    const double bound = std::sqrt(6.0 / widths_[l]);
    const std::size_t n = static_cast<std::size_t>(widths_[l + 1]) * widths_[l];
    float* w = host.data() + w_off_[l];
    for (std::size_t i = 0; i < n; ++i) {
      double u = static_cast<double>(gen() >> 40) * 0x1p-24;  // [0, 1)
      w[i] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
  }
  dev_.to_device(params_, host.data(), host.size());
}

std::vector<std::size_t> Mlp::layer_tensors(int l) const {
  STARRING_CHECK(l >= 0 && l < num_layers(), "Mlp: layer ", l, " out of range");
  std::size_t bias = 2 * static_cast<std::size_t>(num_layers() - 1 - l);
  return {bias + 1, bias};  // weight, bias
}

void Mlp::set_input(const float* x, int n) {
  STARRING_CHECK(n > 0 && n <= max_batch_, "Mlp: batch of ", n, " rows, expected 1..", max_batch_);
  acts_[0] = const_cast<float*>(x);  // read only
  n_ = n;
}

void Mlp::forward_layer(int l) {
  STARRING_CHECK(n_ > 0, "Mlp::forward_layer before set_input");
  const int in = widths_[l], out = widths_[l + 1];
  dev_.gemm(false, true, n_, out, in, 1.0f, acts_[l], params_ + w_off_[l], 0.0f, acts_[l + 1]);
  dev_.bias_act(acts_[l + 1], params_ + b_off_[l], n_, out, l + 1 < num_layers());
}

double Mlp::loss_and_grad(const int* labels, int n, float grad_scale) {
  STARRING_CHECK(n == n_, "Mlp::loss_and_grad: ", n, " labels for a batch of ", n_);
  const int L = num_layers();
  double sum = dev_.softmax_xent(acts_[L], labels, n, widths_[L], dacts_[L], grad_scale);
  return sum / n;
}

void Mlp::backward_layer(int l, bool accumulate) {
  const int in = widths_[l], out = widths_[l + 1];
  float* dy = dacts_[l + 1];
  if (l + 1 < num_layers())
    dev_.relu_backward(dy, acts_[l + 1], static_cast<std::size_t>(n_) * out);
  const float beta = accumulate ? 1.0f : 0.0f;
  dev_.gemm(true, false, out, in, n_, 1.0f, dy, acts_[l], beta, grads_ + w_off_[l]);
  dev_.bias_grad(grads_ + b_off_[l], dy, n_, out, accumulate);
  if (l > 0) dev_.gemm(false, false, n_, in, out, 1.0f, dy, params_ + w_off_[l], 0.0f, dacts_[l]);
}

int Mlp::count_correct(const int* labels, int n) {
  STARRING_CHECK(n == n_, "Mlp::count_correct: ", n, " labels for a batch of ", n_);
  return dev_.count_correct(acts_[num_layers()], labels, n, widths_.back());
}

void Mlp::zero_grads() { dev_.fill(grads_, 0.0f, layout_.total()); }

void Mlp::forward(const float* x, int n) {
  set_input(x, n);
  for (int l = 0; l < num_layers(); ++l) forward_layer(l);
}

const float* Mlp::logits() const { return acts_[num_layers()]; }

double Mlp::train_flops(int n) const {
  double macs = 0;
  for (int l = 0; l < num_layers(); ++l) macs += static_cast<double>(widths_[l]) * widths_[l + 1];
  return 6.0 * n * macs;
}

}  // namespace starring
