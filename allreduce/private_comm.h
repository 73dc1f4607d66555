// A Comm of its own for a backend: the same ranks as `world`, but separate byte counters (so a
// backend reports only its own traffic) and, under MPI, a separate duplicated communicator (so
// the communication thread never contends with the trainer's messages). When `world` is an
// MpiComm or a SubComm of one, the result is an MpiComm over exactly those ranks (so MPI
// collectives work on it); otherwise a SubComm. Collective: every rank of `world` must call it,
// in the same order.
#pragma once
#include <memory>

#include "common/comm.h"

namespace starring {

std::shared_ptr<Comm> private_comm(const std::shared_ptr<Comm>& world);

}  // namespace starring
