#include "allreduce/private_comm.h"

#include <numeric>
#include <vector>

#include "common/mpi_comm.h"
#include "common/sub_comm.h"

namespace starring {

std::shared_ptr<Comm> private_comm(const std::shared_ptr<Comm>& world) {
  std::shared_ptr<Comm> c;
  if (auto* m = dynamic_cast<MpiComm*>(world.get())) {
    c = std::make_shared<MpiComm>(m->mpi_comm());
  } else {
    std::vector<int> all(world->size());
    std::iota(all.begin(), all.end(), 0);
    c = std::make_shared<SubComm>(world, all);
  }
  c->set_timeout(world->timeout());
  return c;
}

}  // namespace starring
