// Stand-ins for common/cuda/ when StarRing is built without CUDA: no GPU device can be made, and
// query_gpus() and the GPU probes say CUDA was not built.
#include "common/device_factories.h"
#include "common/gpu_assignment.h"

namespace starring {

std::unique_ptr<Device> try_make_cuda_device(int, std::string* why) {
  if (why) *why = "built without CUDA";
  return nullptr;
}

GpuSlot describe_gpu(int) {
  GpuSlot s;
  s.host = this_host_name();
  s.note = "built without CUDA";
  return s;
}

GpuSlot probe_gpu_slot(int local_rank) { return describe_gpu(local_rank); }

GpuInfo query_gpus() {
  GpuInfo info;
  info.built = false;
  info.error = "built without CUDA";
  return info;
}

}  // namespace starring
