#include "common/test_hosts.h"

#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"

namespace starring {

int test_host_index() {
  const char* spec = std::getenv("STARRING_TEST_HOSTS");
  if (!spec || !*spec) return -1;
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return -1;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> hosts;
  const std::string s = spec;
  for (std::size_t at = 0;;) {
    const std::size_t comma = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, comma - at);
    char* end = nullptr;
    const long h = std::strtol(item.c_str(), &end, 10);
    // digits only: strtol takes " -1", a negative host that hung the split in host_comm
    STARRING_CONFIG_CHECK(!item.empty() && std::isdigit(static_cast<unsigned char>(item[0])) &&
                              *end == '\0' && h <= 1 << 20,
                          "STARRING_TEST_HOSTS=", s, " (a test hook, common/test_hosts.h): '", item,
                          "' is not a host number (0, 1, ...)");
    hosts.push_back(static_cast<int>(h));
    if (comma == s.size()) break;
    at = comma + 1;
  }
  STARRING_CONFIG_CHECK(static_cast<int>(hosts.size()) == size, "STARRING_TEST_HOSTS=", s,
                        " (a test hook, common/test_hosts.h) names a host for ", hosts.size(),
                        " ranks; the job has ", size);
  return hosts[static_cast<std::size_t>(rank)];
}

}  // namespace starring
