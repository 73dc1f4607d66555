// make_device: picks the CPU or the GPU implementation of Device. A request for a GPU that
// cannot be honoured (no driver, no device, CUDA not built) falls back to the CPU after one
// line on stderr that says why; it never aborts the run.
#include <cstdio>
#include <string>

#include "common/device_factories.h"
#include "common/error.h"

namespace starring {

std::unique_ptr<Device> make_device(const std::string& kind, int threads, int local_rank) {
  STARRING_CONFIG_CHECK(kind == "cpu" || kind == "cuda" || kind == "auto", "unknown device '", kind,
                        "' (expected cpu|cuda|auto)");
  if (kind == "cpu") return make_cpu_device(threads);
  std::string why;
  if (auto gpu = try_make_cuda_device(local_rank, &why)) return gpu;
  // One write: the ranks of a host fall back together into one stderr pipe (see test_device).
  const std::string line = detail::concat("[starring] local rank ", local_rank,
                                          ": no usable CUDA device (", why, "): using the CPU\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  return make_cpu_device(threads);
}

}  // namespace starring
