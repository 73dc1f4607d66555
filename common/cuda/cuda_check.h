// CHECK_CUDA / CHECK_CUBLAS: the one place CUDA and cuBLAS status codes become starring::Error,
// with the failing call, the code's name and message, and the source location.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "common/error.h"

namespace starring {

inline std::string cuda_error_text(cudaError_t e) {
  return detail::concat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

}  // namespace starring

#define CHECK_CUDA(call)                                                                           \
  do {                                                                                             \
    cudaError_t starring_e_ = (call);                                                              \
    if (starring_e_ != cudaSuccess)                                                                \
      throw ::starring::Error(::starring::detail::concat("CUDA call ", #call, " failed (",         \
                                                         ::starring::cuda_error_text(starring_e_), \
                                                         ") [", __FILE__, ":", __LINE__, "]"));    \
  } while (0)

#define CHECK_CUBLAS(call)                                                            \
  do {                                                                                \
    cublasStatus_t starring_s_ = (call);                                              \
    if (starring_s_ != CUBLAS_STATUS_SUCCESS)                                         \
      throw ::starring::Error(::starring::detail::concat(                             \
          "cuBLAS call ", #call, " failed (", cublasGetStatusName(starring_s_), ": ", \
          cublasGetStatusString(starring_s_), ") [", __FILE__, ":", __LINE__, "]"));  \
  } while (0)
