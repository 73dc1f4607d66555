// Stand-ins for common/cuda/ when StarRing is built without CUDA: no GPU device can be made and
// query_gpus() says CUDA was not built.
#include "common/device_factories.h"

namespace starring {

std::unique_ptr<Device> try_make_cuda_device(int, std::string* why) {
  if (why) *why = "built without CUDA";
  return nullptr;
}

GpuInfo query_gpus() {
  GpuInfo info;
  info.built = false;
  info.error = "built without CUDA";
  return info;
}

}  // namespace starring
