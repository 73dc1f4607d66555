#include "common/test_hosts.h"

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/config_detail.h"
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
  const std::string s = spec;
  // config_detail.h's list parser (spaces trimmed, empty entries refused); a host is >= 0
  const std::vector<int> hosts =
      parse_int_list("STARRING_TEST_HOSTS (a test hook, common/test_hosts.h)", s);
  for (int h : hosts)
    STARRING_CONFIG_CHECK(h >= 0, "STARRING_TEST_HOSTS=", s,
                          " (a test hook, common/test_hosts.h): ", h,
                          " is not a host number (0, 1, ...)");
  STARRING_CONFIG_CHECK(static_cast<int>(hosts.size()) == size, "STARRING_TEST_HOSTS=", s,
                        " (a test hook, common/test_hosts.h) names a host for ", hosts.size(),
                        " ranks; the job has ", size);
  return hosts[static_cast<std::size_t>(rank)];
}

}  // namespace starring
