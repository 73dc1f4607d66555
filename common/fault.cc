#include "common/fault.h"

#include <chrono>
#include <cstdio>

namespace starring {

void announce_fault(const std::string& who, const std::string& kind, std::int64_t step) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::fprintf(stderr, "[starring] %s: --fault %s at step %lld (unix time %.6f)\n", who.c_str(),
               kind == "hang" ? "hang: going silent" : kind.c_str(), static_cast<long long>(step),
               now);
  std::fflush(stderr);
}

}  // namespace starring
