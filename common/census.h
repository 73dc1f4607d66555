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
#include <algorithm>
#include <string>
#include <vector>

#include "common/comm.h"

namespace starring {

// Returns "; ranks 0, 2 and 3 timed out here too, rank 1 did not (silent, slow or elsewhere)"
// or "" (one rank, or every rank reported). Never throws: it only decorates an error.
//
// The grace only fits ranks that stalled together (at one step of a collective). Ranks that
// reach a point far apart (loading their data: seconds apart on a loaded machine) time out as
// far apart, so a peer whose note came after the grace was named with the silent one. There the
// notes go out on arrival instead (census_announce on entry, census_heard after a timeout, as
// first_error does, common/comm_util.h): a rank that got there before this one timed out is
// heard however late its own timeout fires.
std::string census(Comm& comm, Seconds grace);

// The grace each caller gives census() or census_heard() after a wait of `timeout` ran out:
// 1.5 s, never more than the timeout itself.
inline Seconds census_grace(Seconds timeout) { return std::min(timeout, Seconds(1.5)); }

// The two halves of census: a one-int note to every other rank on `tag` (fire-and-forget), and
// the clause naming the ranks whose note did not arrive within `grace` ("; ranks 0 and 2 <did>
// too, rank 1 did not (silent, slow or elsewhere)", or "; rank 1 did not <not_do> (silent, ...)"
// when no note came; `did`/`not_do`: "timed out here"/"time out here", "got here"/"get here"),
// "" when every rank's did. census_heard never throws.
void census_announce(Comm& comm, int tag);
std::string census_heard(Comm& comm, int tag, Seconds grace, const char* did, const char* not_do);

// census()'s note alone, for a rank that timed out in the collective but names the peer at fault
// itself (a PeerLiveness's silent peer, allreduce/progress_waiter.h) and takes no census: a peer
// that takes one counts it among the ranks that "timed out here too". Without it, np 3 with rank 2
// silent, rank 0's census read '; ranks 1 and 2 did not time out here' while rank 1, stuck beside
// it, named rank 2. Never throws.
void census_join(Comm& comm);

// "rank 3", "ranks 1 and 3", "ranks 0, 2 and 3": how errors name a list of ranks.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace starring
