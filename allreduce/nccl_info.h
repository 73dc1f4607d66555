// NCCL's version as `starring env` prints it: "2.27.7" when NCCL was built in (ncclGetVersion,
// allreduce/nccl/nccl_info.cc), "not built" otherwise (allreduce/nonccl/nccl_info.cc).
#pragma once
#include <string>

namespace starring {

std::string nccl_version_string();

}  // namespace starring
