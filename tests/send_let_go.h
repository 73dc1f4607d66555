// A send let go unfinished, read by MPI after its owner is done with it (docs/LIMITS.md,
// "Receives abandoned mid-message"): the cases of test_comm_mpi and test_ring share this check.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/kept_memory.h"

namespace starring::testing {

// Rank 1 fills a ReceiveVector of `floats` with 1.0f and calls `fail(buf)`, which must start a
// send to rank 0 of `count` floats of buf, all 1.0f (far above the eager limit), with `tag`, and
// fail before rank 0 posts its receive (rank 0 makes MPI calls meanwhile, but no receive matches
// it: a peer stopped before it took the message). Rank 1 then frees buf, fills a buffer as long
// with a canary (where the freed memory would be reused), and tells rank 0 on tag + 1, which then
// receives the message while rank 1 waits in a barrier (MPI moves it from rank 1's memory).
// Returns, on every rank, what rank 0 got that was not buf's: "" when the send was noted and buf
// kept (common/kept_memory.h), otherwise the count of wrong floats and the first one's bits
// (0x5a5a5a5a: the canary; under ASan, a heap-use-after-free in Open MPI's copy comes first).
inline std::string send_let_go_read_kept(Comm& world, int tag, std::size_t floats,
                                         std::size_t count,
                                         const std::function<void(ReceiveVector<float>&)>& fail) {
  const Seconds kLong(20);
  const int r = world.rank();
  if (r < 2) {  // the connection between ranks 0 and 1 up first (TCP opens it on first use)
    int x = r, y = -1;
    world.sendrecv(&x, sizeof x, 1 - r, &y, sizeof y, 1 - r, tag + 2, kLong);
  }
  unsigned found[2] = {0, 0};        // rank 0: wrong floats, the first one's bits
  std::vector<unsigned char> probe;  // rank 1: allocated after buf was freed
  if (r == 0) {
    char go = 0;
    world.recv(&go, 1, 1, tag + 1, kLong);
    std::vector<float> theirs(count, 0.0f);
    world.recv(theirs.data(), count * sizeof(float), 1, tag, kLong);
    for (const float v : theirs) {
      if (v == 1.0f) continue;
      if (found[0]++ == 0) std::memcpy(&found[1], &v, sizeof v);
    }
  } else if (r == 1) {
    auto buf = std::make_unique<ReceiveVector<float>>(floats, 1.0f);
    fail(*buf);
    buf.reset();
    probe.assign(floats * sizeof(float), 0x5A);
    const char go = 1;
    world.send(&go, 1, 0, tag + 1, kLong);
  }
  world.barrier(kLong);  // rank 0's receive completes as rank 1 polls here
  MPI_Bcast(found, 2, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
  if (found[0] == 0) return "";
  char first[16];
  std::snprintf(first, sizeof first, "0x%08x", found[1]);
  return std::to_string(found[0]) + " of " + std::to_string(count) +
         " floats not sent, the first " + first;
}

}  // namespace starring::testing
