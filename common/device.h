// Device: one interface for the model's math, two implementations.
//   CpuDevice  (common/device_cpu.cc): OpenBLAS cblas_sgemm + plain (fused) loops.
//   CudaDevice (common/cuda/):          cuBLAS + small kernels; built only with CUDA.
// All matrices are ROW-MAJOR float32. Pointers passed to a Device are in that device's memory
// (alloc()); host<->device copies go through to_device()/to_host(). Results of the two devices
// agree within float tolerance.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/optimizer.h"

namespace starring {

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cpu" | "cuda:0 (NVIDIA H200)"
  virtual bool is_gpu() const = 0;

  virtual float* alloc(std::size_t n) = 0;  // zero-initialised floats
  virtual void free(float* p) = 0;
  virtual int* alloc_int(std::size_t n) = 0;
  virtual void free_int(int* p) = 0;
  virtual void to_device(float* dst, const float* host, std::size_t n) = 0;
  virtual void to_host(float* host, const float* src, std::size_t n) = 0;
  virtual void to_device_int(int* dst, const int* host, std::size_t n) = 0;
  virtual void fill(float* p, float v, std::size_t n) = 0;
  // Waits for queued GPU work (no-op on CPU). A GPU device also makes its GPU the calling
  // thread's current one, so code that then creates CUDA/NCCL objects gets the right GPU.
  virtual void synchronize() = 0;

  // C = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) is k x n, C is m x n.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // y[r, :] += bias[:]; then ReLU if relu. y is rows x cols.
  virtual void bias_act(float* y, const float* bias, int rows, int cols, bool relu) = 0;
  // dy[i] = 0 where y[i] <= 0 (ReLU backward on the activation output).
  virtual void relu_backward(float* dy, const float* y, std::size_t n) = 0;
  // db[c] (+)= sum_r dy[r, c]   (accumulate: add to db instead of overwrite)
  virtual void bias_grad(float* db, const float* dy, int rows, int cols, bool accumulate) = 0;
  // Softmax cross-entropy over logits (rows x cols) with labels; writes
  // dlogits = (softmax - onehot) * grad_scale and returns the SUM of per-row losses. Throws Error
  // when a label is outside [0, cols).
  virtual double softmax_xent(const float* logits, const int* labels, int rows, int cols,
                              float* dlogits, float grad_scale) = 0;
  // Number of rows whose argmax equals the label.
  virtual int count_correct(const float* logits, const int* labels, int rows, int cols) = 0;
  // sum of squares (gradient norm).
  virtual double sum_squares(const float* x, std::size_t n) = 0;
  // y = a * x + y
  virtual void axpy(float a, const float* x, float* y, std::size_t n) = 0;
  virtual void scale(float* x, float a, std::size_t n) = 0;

  // One optimizer step on device memory for elements [0, n) of the given slices, with state
  // buffers s1/s2 (device memory, n floats each, zero-initialised). Same math as Optimizer.
  virtual void optimizer_step(const OptimizerConfig& cfg, float* params, const float* grads,
                              float* s1, float* s2, std::size_t n, float lr, std::int64_t step) = 0;
};

// "cpu", "cuda" or "auto". "auto"/"cuda" without a usable GPU fall back to the CPU and log one
// line saying why (never a crash). `threads` sets OpenBLAS threads for the CPU device.
std::unique_ptr<Device> make_device(const std::string& kind, int threads, int local_rank);

// What the GPU side of this build can see (for `starring env`): empty when CUDA was not built.
struct GpuInfo {
  bool built = false;  // CUDA compiled in
  std::string error;   // why no device is usable, if none
  int driver_version = 0, runtime_version = 0;
  struct Gpu {
    std::string name;
    std::size_t mem_bytes = 0;
    int cc_major = 0, cc_minor = 0;
  };
  std::vector<Gpu> gpus;
  bool cublas = false;  // a cuBLAS handle could be made on the calling thread's current GPU
};
// Device queries, and a cuBLAS handle made and destroyed on the calling thread's current GPU
// (GPU 0 in a thread that chose none), which makes a CUDA context there if it has none.
GpuInfo query_gpus();

}  // namespace starring
