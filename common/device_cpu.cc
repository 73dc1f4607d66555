// CpuDevice: the model's math on the host. Matrix products go to OpenBLAS (cblas_sgemm,
// row-major); the element-wise work is plain loops written so GCC vectorises them, each fused
// into one pass over its data (bias + ReLU; softmax + cross-entropy + its gradient).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/device_factories.h"
#include "common/error.h"

namespace starring {
namespace {

void* aligned_zeroed(std::size_t bytes) {
  std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  STARRING_CHECK(p != nullptr, "cpu: out of memory allocating ", bytes, " bytes");
  std::memset(p, 0, rounded);
  return p;
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int threads) {
    STARRING_CHECK(threads >= 1, "cpu device: threads must be >= 1, got ", threads);
    openblas_set_num_threads(threads);
  }
  std::string name() const override { return "cpu"; }
  bool is_gpu() const override { return false; }

  float* alloc(std::size_t n) override {
    return static_cast<float*>(aligned_zeroed(n * sizeof(float)));
  }
  void free(float* p) override { std::free(p); }
  int* alloc_int(std::size_t n) override {
    return static_cast<int*>(aligned_zeroed(n * sizeof(int)));
  }
  void free_int(int* p) override { std::free(p); }
  void to_device(float* dst, const float* host, std::size_t n) override {
    if (n) std::memcpy(dst, host, n * sizeof(float));
  }
  void to_host(float* host, const float* src, std::size_t n) override {
    if (n) std::memcpy(host, src, n * sizeof(float));
  }
  void to_device_int(int* dst, const int* host, std::size_t n) override {
    if (n) std::memcpy(dst, host, n * sizeof(int));
  }
  void fill(float* p, float v, std::size_t n) override { std::fill(p, p + n, v); }
  void synchronize() override {}

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b,
            float beta, float* c) override {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, ta ? m : k, b, tb ? k : n, beta, c, n);
  }

  void bias_act(float* y, const float* bias, int rows, int cols, bool relu) override {
    for (int r = 0; r < rows; ++r) {
      float* __restrict yr = y + static_cast<std::size_t>(r) * cols;
      if (relu) {
        for (int c = 0; c < cols; ++c) yr[c] = std::max(yr[c] + bias[c], 0.0f);
      } else {
        for (int c = 0; c < cols; ++c) yr[c] += bias[c];
      }
    }
  }

  void relu_backward(float* dy, const float* y, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }

  void bias_grad(float* db, const float* dy, int rows, int cols, bool accumulate) override {
    if (!accumulate) std::fill(db, db + cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* __restrict dr = dy + static_cast<std::size_t>(r) * cols;
      for (int c = 0; c < cols; ++c) db[c] += dr[c];
    }
  }

  double softmax_xent(const float* logits, const int* labels, int rows, int cols, float* dlogits,
                      float grad_scale) override;
  int count_correct(const float* logits, const int* labels, int rows, int cols) override;

  double sum_squares(const float* x, std::size_t n) override {
    // Sixteen float lanes per block of 1024 elements (vectorised), blocks summed in double.
    constexpr std::size_t kBlock = 1024;
    double total = 0.0;
    std::size_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
      float lane[16] = {};
      for (std::size_t j = 0; j < kBlock; j += 16)
        for (int l = 0; l < 16; ++l) lane[l] += x[i + j + l] * x[i + j + l];
      double s = 0.0;
      for (float v : lane) s += v;
      total += s;
    }
    for (; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
    return total;
  }

  void axpy(float a, const float* x, float* y, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) y[i] += a * x[i];
  }
  void scale(float* x, float a, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) x[i] *= a;
  }

  void optimizer_step(const OptimizerConfig& cfg, float* params, const float* grads, float* s1,
                      float* s2, std::size_t n, float lr, std::int64_t step) override {
    optimizer_update(optimizer_scalars(cfg, lr, step), params, grads, s1, s2, n);
  }
};

// One pass per row: max, sum of exponentials, loss, then the gradient from the stored
// exponentials. loss_r = log(sum_j exp(x_j - max)) - (x_label - max).
double CpuDevice::softmax_xent(const float* logits, const int* labels, int rows, int cols,
                               float* dlogits, float grad_scale) {
  double total = 0.0;
  for (int r = 0; r < rows; ++r) {
    const float* x = logits + static_cast<std::size_t>(r) * cols;
    float* d = dlogits + static_cast<std::size_t>(r) * cols;
    int label = labels[r];
    STARRING_CHECK(label >= 0 && label < cols, "softmax_xent: label ", label, " of row ", r,
                   " is outside [0, ", cols, ")");
    float mx = x[0];
    for (int c = 1; c < cols; ++c) mx = std::max(mx, x[c]);
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) {
      d[c] = std::exp(x[c] - mx);
      sum += d[c];
    }
    total += std::log(static_cast<double>(sum)) - static_cast<double>(x[label] - mx);
    float inv = grad_scale / sum;
    for (int c = 0; c < cols; ++c) d[c] *= inv;
    d[label] -= grad_scale;
  }
  return total;
}

int CpuDevice::count_correct(const float* logits, const int* labels, int rows, int cols) {
  int correct = 0;
  for (int r = 0; r < rows; ++r) {
    const float* x = logits + static_cast<std::size_t>(r) * cols;
    int best = static_cast<int>(std::max_element(x, x + cols) - x);
    correct += best == labels[r];
  }
  return correct;
}

}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads) {
  return std::make_unique<CpuDevice>(threads);
}

}  // namespace starring
