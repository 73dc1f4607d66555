// Helpers shared by the Comm implementations (defined in common/comm.cc).
#pragma once
#include <exception>
#include <string>

#include "common/comm.h"

namespace starring {

// "send to rank 2 (tag 7)" / "recv from any rank (tag 7)".
std::string describe_op(bool is_send, int peer, int tag);

// "rank 1: timeout after 5.0 s in <op>": the TimeoutError text every implementation uses.
std::string timeout_message(const Comm& comm, Seconds timeout, const std::string& op);

// Every rank passes its error message (empty: none); every rank gets the lowest failing rank's
// message (empty when no rank failed). Gather to rank 0 and back, each wait bounded by `timeout`;
// for agreeing, before work that needs every rank, that some rank cannot start. A timeout names
// the ranks that did not get there (each rank sends a note on arrival, tags::kArrival, so a rank
// that arrived seconds later than this one but before its timeout is not named).
std::string first_error(Comm& comm, const std::string& mine, int tag, Seconds timeout);

// What first_error carries when the kind of a failure matters on the other ranks (exit 2 for bad
// input, 1 otherwise): kind + message, the kind 'C' for a ConfigError and 'E' for anything else.
char failure_kind(const std::exception& e);
// Throws `text` as a ConfigError for kind 'C', else as an Error.
[[noreturn]] void throw_failure(char kind, const std::string& text);
// The same with the failing rank: "<kind><rank> <message>" (failure_note), for a step that every
// rank agrees on with first_error before work that needs them all (loading the data, setting up
// training). failure_note_message: the message, as the failing rank wrote it.
std::string failure_note(const std::exception& e, int rank);
std::string failure_note_message(const std::string& note);
// On a rank that did not fail: throws the note's failure, of its kind, as
// "<where>: stopping, rank R <doing>: <message>" (the message without its own "rank R: ").
[[noreturn]] void throw_peer_failure(const std::string& where, const std::string& note,
                                     const std::string& doing);

// A barrier built from point-to-point messages (dissemination, ceil(log2 n) rounds, tags
// tags::kBarrier + round), for Comm implementations without a native one.
void barrier_over_p2p(Comm& comm, Seconds timeout);

}  // namespace starring
