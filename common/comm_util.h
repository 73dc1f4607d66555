// Helpers shared by the Comm implementations (defined in common/comm.cc).
#pragma once
#include <cstdint>
#include <exception>
#include <string>

#include "common/comm.h"

namespace starring {

// "send to rank 2 (tag 7)" / "recv from any rank (tag 7)".
std::string describe_op(bool is_send, int peer, int tag);

// "rank 1: timeout after 5.0 s in <op>": the TimeoutError text every implementation uses.
std::string timeout_message(const Comm& comm, Seconds timeout, const std::string& op);

// A receive of a message whose size both sides know (a value, a record, a vector of agreed
// length): one of another size throws Error "rank 0: rank 2 sent 8 bytes for <what> (tag 101),
// expected 40". A longer message never lands here: InProcComm throws its truncation error (naming
// both ranks), MpiComm too (MPI_ERR_TRUNCATE, common/mpi_comm.cc).
RecvStatus recv_exact(Comm& comm, void* buf, std::size_t bytes, int peer, int tag, Seconds timeout,
                      const std::string& what);

// Text of any length: send_text sends its length (a uint64) and then the bytes, in pieces of at
// most 256 MiB (MPI counts are ints). recv_text refuses a length above `limit` before it
// allocates anything (Error "rank 1: rank 0 sent a length of <n> bytes for <what> (tag 140), more
// than the <limit> it can be"), grows the string one piece at a time as the pieces arrive, and
// checks every piece's size (recv_exact).
void send_text(Comm& comm, const std::string& text, int peer, int tag, Seconds timeout);
std::string recv_text(Comm& comm, int peer, int tag, Seconds timeout, std::uint64_t limit,
                      const std::string& what);
// The limit for texts that are messages, not data: an error, a path, a rank's totals.
inline constexpr std::uint64_t kMaxNoteBytes = std::uint64_t{64} << 20;

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
