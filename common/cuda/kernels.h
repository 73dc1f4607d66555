// Launchers for the small CUDA kernels of CudaDevice (kernels.cu). Each enqueues on `stream`
// and returns at once; launch errors surface through CHECK_CUDA(cudaGetLastError()) in the
// caller. Pointers are device memory; matrices are row-major.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "common/optimizer.h"

namespace starring::cuda {

void bias_act(float* y, const float* bias, int rows, int cols, bool relu, cudaStream_t stream);
void relu_backward(float* dy, const float* y, std::size_t n, cudaStream_t stream);
void bias_grad(float* db, const float* dy, int rows, int cols, bool accumulate,
               cudaStream_t stream);
// Per-row loss into row_loss[rows] (double); bad_label[0] set to 1 if a label is out of range.
void softmax_xent(const float* logits, const int* labels, int rows, int cols, float* dlogits,
                  float grad_scale, double* row_loss, int* bad_label, cudaStream_t stream);
// hit[r] = 1 when row r's argmax equals its label, else 0.
void count_correct(const float* logits, const int* labels, int rows, int cols, int* hit,
                   cudaStream_t stream);
// Writes kSumSquaresBlocks partial sums (double) into partial.
constexpr int kSumSquaresBlocks = 256;
void sum_squares(const float* x, std::size_t n, double* partial, cudaStream_t stream);
void axpy(float a, const float* x, float* y, std::size_t n, cudaStream_t stream);
void scale(float* x, float a, std::size_t n, cudaStream_t stream);
void fill(float* p, float v, std::size_t n, cudaStream_t stream);
// The element-wise update of optimizer.cc (same formulas, fmaf for each multiply-add).
void optimizer_update(const OptimizerScalars& k, float* params, const float* grads, float* s1,
                      float* s2, std::size_t n, cudaStream_t stream);

}  // namespace starring::cuda
