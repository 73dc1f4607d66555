// The cuBLAS call for a row-major GEMM, as plain data (no CUDA headers: the CPU tests check it
// against OpenBLAS's column-major sgemm, tests/common/test_device.cc ColumnMajorGemm.*).
// cuBLAS is column-major: a row-major C (m x n, leading dimension n) is the column-major C^T
// (n x m, same memory), and C^T = op(B)^T op(A)^T. So row-major C = op(A) op(B) is the
// column-major product of the row-major B first and A second, with m and n swapped, each
// operand's transpose flag kept and the row-major leading dimensions unchanged.
#pragma once

namespace starring::cuda {

struct ColumnMajorGemm {
  bool trans_first, trans_second;  // transa, transb of cublasSgemm
  int m, n, k;                     // of the column-major product
  int ld_first, ld_second, ldc;    // lda (of row-major B), ldb (of row-major A), ldc
};

// For Device::gemm(ta, tb, m, n, k, alpha, a, b, beta, c): cublasSgemm(handle, trans_first,
// trans_second, m, n, k, alpha, b, ld_first, a, ld_second, beta, c, ldc).
constexpr ColumnMajorGemm column_major_gemm(bool ta, bool tb, int m, int n, int k) {
  return {tb, ta, n, m, k, tb ? k : n, ta ? m : k, n};
}

}  // namespace starring::cuda
