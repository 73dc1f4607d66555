// Helpers shared by the Comm implementations (defined in common/comm.cc).
#pragma once
#include <string>

#include "common/comm.h"

namespace starring {

// "send to rank 2 (tag 7)" / "recv from any rank (tag 7)".
std::string describe_op(bool is_send, int peer, int tag);

// "rank 1: timeout after 5.0 s in <op>": the TimeoutError text every implementation uses.
std::string timeout_message(const Comm& comm, Seconds timeout, const std::string& op);

// Every rank passes its error message (empty: none); every rank gets the lowest failing rank's
// message (empty when no rank failed). Gather to rank 0 and back, each wait bounded by `timeout`;
// for agreeing, before work that needs every rank, that some rank cannot start.
std::string first_error(Comm& comm, const std::string& mine, int tag, Seconds timeout);

// A barrier built from point-to-point messages (dissemination, ceil(log2 n) rounds, tags
// tags::kBarrier + round), for Comm implementations without a native one.
void barrier_over_p2p(Comm& comm, Seconds timeout);

}  // namespace starring
