// Small element-wise and row-wise kernels for CudaDevice. Every kernel is a grid-stride loop:
// the grid is capped at kMaxBlocks (grid.h), so each thread may take several elements, rows or
// columns, and any n (past 2^31 too: indices are size_t) is covered. Row-wise ones (softmax
// cross-entropy, argmax) give one thread a row, which suits the few classes of this model;
// bias_grad gives one thread a column so reads coalesce across threads, and adds the rows in the
// CPU's order. Reductions that must be deterministic (sum of squares, the loss) write fixed
// partial results that the host adds in order.
#include "common/cuda/grid.h"
#include "common/cuda/kernels.h"

namespace starring::cuda {
namespace {

// First index and stride of this thread's grid-stride loop.
__device__ std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ std::size_t grid_stride() { return static_cast<std::size_t>(blockDim.x) * gridDim.x; }

// ReLU as the CPU's std::max(v, 0.0f), i.e. v < 0 ? 0 : v: a NaN stays NaN (fmaxf(NaN, 0) is 0,
// which let a GPU run zero a hidden layer's NaN and train on where the CPU's loss turns NaN and
// the run is reported diverged), and -0 stays -0.
__global__ void bias_act_k(float* y, const float* bias, std::size_t n, int cols, bool relu) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    float v = y[i] + bias[i % cols];
    y[i] = relu && v < 0.0f ? 0.0f : v;
  }
}

__global__ void relu_backward_k(float* dy, const float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
}

// The running sum starts from db[c] when accumulating, as the CPU's loop does, so both add the
// same floats in the same order.
__global__ void bias_grad_k(float* db, const float* dy, int rows, int cols, bool accumulate) {
  for (std::size_t c = first_index(); c < static_cast<std::size_t>(cols); c += grid_stride()) {
    float s = accumulate ? db[c] : 0.0f;
    for (int r = 0; r < rows; ++r) s += dy[static_cast<std::size_t>(r) * cols + c];
    db[c] = s;
  }
}

// The CPU's formula (device_cpu.cc): the row's maximum is subtracted before exp, so no exp
// overflows; loss_r = log(sum_j exp(x_j - max)) - (x_label - max).
__global__ void softmax_xent_k(const float* logits, const int* labels, int rows, int cols,
                               float* dlogits, float grad_scale, double* row_loss, int* bad_label) {
  for (std::size_t r = first_index(); r < static_cast<std::size_t>(rows); r += grid_stride()) {
    const float* x = logits + r * cols;
    float* d = dlogits + r * cols;
    int label = labels[r];
    if (label < 0 || label >= cols) {
      *bad_label = 1;
      row_loss[r] = 0.0;
      continue;
    }
    float mx = x[0];
    for (int c = 1; c < cols; ++c) mx = fmaxf(mx, x[c]);
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) {
      d[c] = expf(x[c] - mx);
      sum += d[c];
    }
    row_loss[r] = log(static_cast<double>(sum)) - static_cast<double>(x[label] - mx);
    float inv = grad_scale / sum;
    for (int c = 0; c < cols; ++c) d[c] *= inv;
    d[label] -= grad_scale;
  }
}

__global__ void count_correct_k(const float* logits, const int* labels, int rows, int cols,
                                int* hit) {
  for (std::size_t r = first_index(); r < static_cast<std::size_t>(rows); r += grid_stride()) {
    const float* x = logits + r * cols;
    int best = 0;
    for (int c = 1; c < cols; ++c)
      if (x[c] > x[best]) best = c;  // first maximum, like std::max_element
    hit[r] = best == labels[r] ? 1 : 0;
  }
}

__global__ void sum_squares_k(const float* x, std::size_t n, double* partial) {
  __shared__ double buf[kThreads];
  double s = 0.0;
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    s += static_cast<double>(x[i]) * x[i];
  buf[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = buf[0];
}

__global__ void axpy_k(float a, const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = fmaf(a, x[i], y[i]);
}

__global__ void scale_k(float* x, float a, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) x[i] *= a;
}

__global__ void fill_k(float* p, float v, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) p[i] = v;
}

__global__ void sgd_k(OptimizerScalars k, float* p, const float* g, float* m, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    float gi = fmaf(k.weight_decay, p[i], g[i]);
    float mi = fmaf(k.momentum, m[i], gi);
    m[i] = mi;
    p[i] = fmaf(-k.lr, mi, p[i]);
  }
}

__global__ void adamw_k(OptimizerScalars k, float* p, const float* g, float* m, float* v,
                        std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    float gi = g[i];
    float mi = fmaf(k.beta1, m[i], __fmul_rn(k.one_minus_beta1, gi));
    float vi = fmaf(k.beta2, v[i], __fmul_rn(k.one_minus_beta2, __fmul_rn(gi, gi)));
    m[i] = mi;
    v[i] = vi;
    float denom = fmaf(__fsqrt_rn(vi), k.inv_sqrt_bc2, k.eps);
    p[i] = fmaf(p[i], k.decay, -__fmul_rn(k.step_size, __fdiv_rn(mi, denom)));
  }
}

}  // namespace

void bias_act(float* y, const float* bias, int rows, int cols, bool relu, cudaStream_t stream) {
  std::size_t n = static_cast<std::size_t>(rows) * cols;
  bias_act_k<<<blocks_for(n), kThreads, 0, stream>>>(y, bias, n, cols, relu);
}
void relu_backward(float* dy, const float* y, std::size_t n, cudaStream_t stream) {
  relu_backward_k<<<blocks_for(n), kThreads, 0, stream>>>(dy, y, n);
}
void bias_grad(float* db, const float* dy, int rows, int cols, bool accumulate,
               cudaStream_t stream) {
  bias_grad_k<<<blocks_for(cols), kThreads, 0, stream>>>(db, dy, rows, cols, accumulate);
}
void softmax_xent(const float* logits, const int* labels, int rows, int cols, float* dlogits,
                  float grad_scale, double* row_loss, int* bad_label, cudaStream_t stream) {
  softmax_xent_k<<<blocks_for(rows), kThreads, 0, stream>>>(logits, labels, rows, cols, dlogits,
                                                            grad_scale, row_loss, bad_label);
}
void count_correct(const float* logits, const int* labels, int rows, int cols, int* hit,
                   cudaStream_t stream) {
  count_correct_k<<<blocks_for(rows), kThreads, 0, stream>>>(logits, labels, rows, cols, hit);
}
void sum_squares(const float* x, std::size_t n, double* partial, cudaStream_t stream) {
  sum_squares_k<<<kSumSquaresBlocks, kThreads, 0, stream>>>(x, n, partial);
}
void axpy(float a, const float* x, float* y, std::size_t n, cudaStream_t stream) {
  axpy_k<<<blocks_for(n), kThreads, 0, stream>>>(a, x, y, n);
}
void scale(float* x, float a, std::size_t n, cudaStream_t stream) {
  scale_k<<<blocks_for(n), kThreads, 0, stream>>>(x, a, n);
}
void fill(float* p, float v, std::size_t n, cudaStream_t stream) {
  fill_k<<<blocks_for(n), kThreads, 0, stream>>>(p, v, n);
}
void optimizer_update(const OptimizerScalars& k, float* params, const float* grads, float* s1,
                      float* s2, std::size_t n, cudaStream_t stream) {
  if (k.adamw)
    adamw_k<<<blocks_for(n), kThreads, 0, stream>>>(k, params, grads, s1, s2, n);
  else
    sgd_k<<<blocks_for(n), kThreads, 0, stream>>>(k, params, grads, s1, n);
}

}  // namespace starring::cuda
