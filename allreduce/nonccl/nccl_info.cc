// NCCL not built into this binary (STARRING_CUDA=OFF, or NCCL not found at configure time).
#include "allreduce/nccl_info.h"

namespace starring {

std::string nccl_version_string() { return "not built"; }

}  // namespace starring
