// Who is who in a parameter-server job, decided from the Config (never the environment).
//   --servers S          : the communicator's last S ranks are servers, the first W = size - S
//                          are workers (mpirun -np W+S);
//   --servers colocated  : every rank is a worker and also serves one shard from a thread of its
//                          own process (BytePS-style); server i lives on worker rank i.
#pragma once
#include <string>
#include <vector>

#include "common/config.h"

namespace starring::ps {

struct PsGroup {
  std::vector<int> worker_ranks;  // index = worker index
  std::vector<int> server_ranks;  // index = server index
  bool colocated = false;

  int num_workers() const { return static_cast<int>(worker_ranks.size()); }
  int num_servers() const { return static_cast<int>(server_ranks.size()); }
  int worker_index(int rank) const;  // -1 when `rank` is not a worker
  int server_index(int rank) const;  // -1 when `rank` holds no server shard
  bool is_dedicated_server(int rank) const { return !colocated && server_index(rank) >= 0; }
};

// Throws ConfigError when --servers is not a positive count or "colocated", or leaves no worker.
PsGroup make_ps_group(const std::string& servers, int comm_size);

}  // namespace starring::ps
