#include "allreduce/private_comm.h"

#include <numeric>
#include <vector>

#include "common/mpi_comm.h"
#include "common/stall_watch.h"
#include "common/sub_comm.h"

namespace starring {

namespace {

// An MPI communicator over exactly the ranks of `c` when it is an MpiComm, or a SubComm of an
// MpiComm (collective over c's ranks only: MPI_Comm_create_group); MPI_COMM_NULL otherwise.
MPI_Comm mpi_group_comm(Comm& c) {
  if (auto* m = dynamic_cast<MpiComm*>(&c)) return m->mpi_comm();
  auto* sub = dynamic_cast<SubComm*>(&c);
  if (!sub) return MPI_COMM_NULL;
  auto* parent = dynamic_cast<MpiComm*>(&sub->parent());
  if (!parent) return MPI_COMM_NULL;
  MPI_Group all, members;
  CHECK_MPI(MPI_Comm_group(parent->mpi_comm(), &all));
  const auto& ranks = sub->members();
  CHECK_MPI(MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &members));
  MPI_Comm out = MPI_COMM_NULL;
  {
    StallWatch watch("MPI_Comm_create_group (the backend's communicator)");
    CHECK_MPI(MPI_Comm_create_group(parent->mpi_comm(), members, 0, &out));
  }
  MPI_Group_free(&members);
  MPI_Group_free(&all);
  return out;
}

}  // namespace

std::shared_ptr<Comm> private_comm(const std::shared_ptr<Comm>& world) {
  std::shared_ptr<Comm> c;
  if (dynamic_cast<MpiComm*>(world.get())) {
    c = std::make_shared<MpiComm>(mpi_group_comm(*world));
  } else if (MPI_Comm group = mpi_group_comm(*world); group != MPI_COMM_NULL) {
    c = std::make_shared<MpiComm>(group);  // duplicates it
    MPI_Comm_free(&group);
  } else {
    std::vector<int> all(world->size());
    std::iota(all.begin(), all.end(), 0);
    c = std::make_shared<SubComm>(world, all);
  }
  c->set_timeout(world->timeout());
  return c;
}

}  // namespace starring
