// Census: after a collective operation timed out on this rank, find out which ranks are stuck in
// it too, so the error can name the one that is not.
//
// A ring rank that times out can only name its predecessor, which may itself be waiting further
// up the ring, and MPI_Iallreduce names nobody. So each rank whose collective times out sends a
// one-int "stuck" note to every other rank on a tag of its own, then collects the others' notes
// for a short grace period (their timeouts fire at about the same time, since they stalled at
// the same step). A rank that sent no note is silent, slow, or somewhere else: that is the one to
// name. Notes are fire-and-forget (their buffer is static), so a dead peer costs nothing.
#pragma once
#include <string>
#include <vector>

#include "common/comm.h"

namespace starring {

// Returns "; ranks 0, 2 and 3 timed out here too, rank 1 did not (silent, slow or elsewhere)"
// or "" (one rank, or every rank reported). Never throws: it only decorates an error.
std::string census(Comm& comm, Seconds grace);

// "rank 3", "ranks 1 and 3", "ranks 0, 2 and 3": how errors name a list of ranks.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace starring
