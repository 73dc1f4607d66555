#include "ps/ps_group.h"

#include <algorithm>

#include "common/error.h"

namespace starring::ps {

static int index_in(const std::vector<int>& v, int rank) {
  auto it = std::find(v.begin(), v.end(), rank);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

int PsGroup::worker_index(int rank) const { return index_in(worker_ranks, rank); }
int PsGroup::server_index(int rank) const { return index_in(server_ranks, rank); }

PsGroup make_ps_group(const std::string& servers, int comm_size) {
  PsGroup g;
  if (servers == "colocated") {
    g.colocated = true;
    for (int r = 0; r < comm_size; ++r) {
      g.worker_ranks.push_back(r);
      g.server_ranks.push_back(r);
    }
    return g;
  }
  int s = 0;
  try {
    std::size_t used = 0;
    s = std::stoi(servers, &used);
    if (used != servers.size()) s = 0;
  } catch (const std::exception&) {
    s = 0;
  }
  STARRING_CONFIG_CHECK(s >= 1,
                        "--servers must be a positive number of server ranks or "
                        "'colocated', got '",
                        servers, "'");
  STARRING_CONFIG_CHECK(comm_size - s >= 1, "--servers ", s, " needs at least ", s + 1, " ranks (",
                        s, s == 1 ? " server" : " servers", " + at least 1 worker) but ", comm_size,
                        comm_size == 1 ? " was" : " were", " started: run mpirun -np W+", s,
                        " for W workers");
  for (int r = 0; r < comm_size - s; ++r) g.worker_ranks.push_back(r);
  for (int r = comm_size - s; r < comm_size; ++r) g.server_ranks.push_back(r);
  return g;
}

}  // namespace starring::ps
