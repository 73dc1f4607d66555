// Launch shape of kernels.cu's grid-stride kernels, as plain data (no CUDA headers: the CPU tests
// check it, tests/common/test_device.cc KernelGrid.*). The grid is capped at kMaxBlocks blocks of
// kThreads, so a launch is always valid (gridDim.x <= 2^31 - 1, at least one block even for n = 0)
// and each thread takes every (kThreads * blocks)-th element from its first: any n, past 2^31
// too (indices are size_t in the kernels).
#pragma once
#include <cstddef>

namespace starring::cuda {

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 4096;

// Blocks for n elements (rows, columns): ceil(n / kThreads) in [1, kMaxBlocks], computed without
// the overflow of (n + kThreads - 1) near SIZE_MAX.
constexpr int blocks_for(std::size_t n) {
  const std::size_t b = n / kThreads + (n % kThreads != 0);
  return static_cast<int>(b == 0 ? 1 : b < kMaxBlocks ? b : kMaxBlocks);
}

}  // namespace starring::cuda
