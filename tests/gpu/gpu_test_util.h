// Helpers for the GPU tests (label gpu): a CUDA device or a clean skip saying why, host copies of
// device buffers, closed-form data, and bit-for-bit / tolerance comparisons.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/device.h"
#include "common/gpu_assignment.h"

namespace starring::gpu_test {

// A CUDA device on GPU `local_rank % count`, or nullptr with *why set (no GPU, no driver, CUDA
// not built). make_device("cuda") would fall back to the CPU; the tests want to know. The probe
// only queries the devices: query_gpus() would make a CUDA context and a cuBLAS handle on the
// calling thread's GPU, GPU 0 in a new process, so under mpirun -np G (device_check.sh's mgpu_*
// steps) every rank would hold one on GPU 0 besides its own.
inline std::unique_ptr<Device> cuda_or_null(std::string* why, int local_rank = 0) {
  const GpuSlot slot = probe_gpu_slot(local_rank);
  if (!slot.has_gpu()) {
    *why = "no usable GPU: " + (slot.note.empty() ? std::string("none found") : slot.note);
    return nullptr;
  }
  auto d = make_device("cuda", 1, local_rank);
  if (!d->is_gpu()) {
    *why = "make_device(\"cuda\") fell back to the CPU";
    return nullptr;
  }
  return d;
}

#define GPU_OR_SKIP(var)                                     \
  std::string var##_why;                                     \
  auto var = ::starring::gpu_test::cuda_or_null(&var##_why); \
  if (!var) GTEST_SKIP() << var##_why

// Closed-form data: value of element i of buffer `which` (|v| < 1.2).
inline std::vector<float> data(std::size_t n, int which) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = std::sin(0.3f * static_cast<float>(i % 100003) + 1.7f * static_cast<float>(which)) *
           (1.0f + 0.01f * static_cast<float>(i % 13));
  return v;
}
inline std::vector<int> labels(std::size_t rows, int cols) {
  std::vector<int> l(rows);
  for (std::size_t r = 0; r < rows; ++r) l[r] = static_cast<int>((r * 7 + 3) % cols);
  return l;
}

// A device buffer with host copies in and out.
struct Buf {
  Device& d;
  float* p;
  std::size_t n;
  Buf(Device& dev, const std::vector<float>& h) : d(dev), p(dev.alloc(h.size())), n(h.size()) {
    d.to_device(p, h.data(), n);
  }
  Buf(Device& dev, std::size_t count) : d(dev), p(dev.alloc(count)), n(count) {}
  ~Buf() { d.free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  std::vector<float> get() const {
    std::vector<float> h(n);
    d.to_host(h.data(), p, n);
    return h;
  }
  // Elements [lo, lo + count).
  std::vector<float> get(std::size_t lo, std::size_t count) const {
    std::vector<float> h(count);
    d.to_host(h.data(), p + lo, count);
    return h;
  }
};
struct IntBuf {
  Device& d;
  int* p;
  IntBuf(Device& dev, const std::vector<int>& h) : d(dev), p(dev.alloc_int(h.size())) {
    d.to_device_int(p, h.data(), h.size());
  }
  ~IntBuf() { d.free_int(p); }
  IntBuf(const IntBuf&) = delete;
  IntBuf& operator=(const IntBuf&) = delete;
};

// Index of the first element whose bits differ, or -1.
inline long first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<long>(i);
  return -1;
}

// Largest |got - want| / (atol + rtol |want|): <= 1 passes.
inline double worst_ratio(const std::vector<float>& got, const std::vector<float>& want,
                          double rtol, double atol, std::size_t* where) {
  double worst = got.size() == want.size() ? 0.0 : 1e30;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    double r = std::fabs(double(got[i]) - want[i]) / (atol + rtol * std::fabs(double(want[i])));
    if (!(r <= worst)) {  // NaN counts as worst
      worst = std::isnan(r) ? 1e30 : r;
      *where = i;
    }
  }
  return worst;
}

#define EXPECT_CLOSE(got, want, rtol, atol, what)                                               \
  do {                                                                                          \
    std::size_t at_ = 0;                                                                        \
    double r_ = ::starring::gpu_test::worst_ratio((got), (want), (rtol), (atol), &at_);         \
    EXPECT_LE(r_, 1.0) << (what) << ": worst at " << at_ << ": " << (got)[at_] << " vs "        \
                       << (want)[at_] << " (tolerance " << (atol) << " + " << (rtol) << "|x|)"; \
  } while (0)

}  // namespace starring::gpu_test
