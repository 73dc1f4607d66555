// NCCL built in: the library's own version (ncclGetVersion needs no GPU), and the header's.
#include "allreduce/nccl_info.h"

#include <nccl.h>

#include <string>

namespace starring {

std::string nccl_version_string() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "built, but ncclGetVersion failed";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  std::string lib = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                    std::to_string(v % 100);
  return lib + " (headers " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
         std::to_string(NCCL_PATCH) + ")";
}

}  // namespace starring
