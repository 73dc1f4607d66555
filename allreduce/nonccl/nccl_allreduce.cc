// Stand-in for builds without NCCL: the nccl backend exists by name and says why it cannot run.
#include "allreduce/allreducer.h"
#include "common/error.h"

namespace starring {

std::unique_ptr<Allreducer> make_nccl_allreducer(std::shared_ptr<Comm> comm, Device*, bool,
                                                 Seconds) {
  throw ConfigError(comm->where() +
                    ": backend 'nccl' is not available: StarRing was built without NCCL "
                    "(configure with -DSTARRING_CUDA=ON where CUDA and NCCL are installed)");
}

}  // namespace starring
