// The non-virtual parts of Comm: blocking forms built on isend/irecv + wait, byte counters.
#include "common/comm.h"

#include <algorithm>
#include <cstdio>

#include "common/census.h"
#include "common/comm_util.h"
#include "common/error.h"
#include "common/kept_memory.h"

namespace starring {

namespace {
using Clock = std::chrono::steady_clock;

Seconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Seconds>(deadline - Clock::now());
  return left.count() > 0 ? left : Seconds(0);
}
}  // namespace

// A send that failed (timed out) is let go unfinished as the error unwinds, and MPI may still read
// `buf` afterwards, which the caller frees: noted first, so that its owner keeps the memory
// (Request::note_if_unfinished, common/kept_memory.h).
void Comm::send(const void* buf, std::size_t bytes, int peer, int tag, Seconds timeout) {
  auto s = isend(buf, bytes, peer, tag);
  try {
    s->wait(timeout);
  } catch (...) {
    s->note_if_unfinished();
    throw;
  }
}

RecvStatus Comm::recv(void* buf, std::size_t bytes, int peer, int tag, Seconds timeout) {
  return irecv(buf, bytes, peer, tag)->wait(timeout);
}

RecvStatus Comm::sendrecv(const void* sbuf, std::size_t sbytes, int dst, void* rbuf,
                          std::size_t rbytes, int src, int tag, Seconds timeout) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  auto r = irecv(rbuf, rbytes, src, tag);  // pre-post the receive before sending
  auto s = isend(sbuf, sbytes, dst, tag);
  try {
    RecvStatus st = r->wait(remaining(deadline));
    s->wait(remaining(deadline));
    return st;
  } catch (...) {
    s->note_if_unfinished();  // as in send()
    throw;
  }
}

CommCounters Comm::counters() const {
  CommCounters c;
  c.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  c.bytes_recv = bytes_recv_.load(std::memory_order_relaxed);
  c.msgs_sent = msgs_sent_.load(std::memory_order_relaxed);
  c.msgs_recv = msgs_recv_.load(std::memory_order_relaxed);
  return c;
}

std::string Comm::where() const { return "rank " + std::to_string(rank()); }

void Comm::count_sent(std::size_t bytes) {
  bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  msgs_sent_.fetch_add(1, std::memory_order_relaxed);
}

void Comm::count_recv(std::size_t bytes) {
  bytes_recv_.fetch_add(bytes, std::memory_order_relaxed);
  msgs_recv_.fetch_add(1, std::memory_order_relaxed);
}

std::string describe_op(bool is_send, int peer, int tag) {
  std::string who = peer == kAnySource ? "any rank" : "rank " + std::to_string(peer);
  return std::string(is_send ? "send to " : "recv from ") + who + " (tag " + std::to_string(tag) +
         ")";
}

std::string timeout_message(const Comm& comm, Seconds timeout, const std::string& op) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", timeout.count());
  return comm.where() + ": timeout after " + secs + " s in " + op;
}

char failure_kind(const std::exception& e) {
  return dynamic_cast<const ConfigError*>(&e) ? 'C' : 'E';
}

void throw_failure(char kind, const std::string& text) {
  if (kind == 'C') throw ConfigError(text);
  throw Error(text);
}

std::string failure_note(const std::exception& e, int rank) {
  return detail::concat(failure_kind(e), rank, " ", e.what());
}

std::string failure_note_message(const std::string& note) {
  const std::size_t space = note.find(' ');
  return space == std::string::npos ? std::string() : note.substr(space + 1);
}

void throw_peer_failure(const std::string& where, const std::string& note,
                        const std::string& doing) {
  const std::string who = "rank " + note.substr(note.empty() ? 0 : 1, note.find(' ') - 1);
  std::string what = failure_note_message(note);
  if (what.rfind(who + ": ", 0) == 0) what.erase(0, who.size() + 2);  // named once
  throw_failure(note.empty() ? 'E' : note[0],
                where + ": stopping, " + who + " " + doing + ": " + what);
}

RecvStatus recv_exact(Comm& comm, void* buf, std::size_t bytes, int peer, int tag, Seconds timeout,
                      const std::string& what) {
  const RecvStatus st = comm.recv(buf, bytes, peer, tag, timeout);
  if (st.bytes != bytes)
    throw Error(detail::concat(comm.where(), ": rank ", st.source, " sent ", st.bytes,
                               " bytes for ", what, " (tag ", tag, "), expected ", bytes));
  return st;
}

namespace {
constexpr std::size_t kTextPiece = std::size_t{1} << 28;  // MPI counts are ints
}  // namespace

void send_text(Comm& comm, const std::string& text, int peer, int tag, Seconds timeout) {
  const std::uint64_t n = text.size();
  comm.send(&n, sizeof n, peer, tag, timeout);
  for (std::size_t at = 0; at < text.size(); at += kTextPiece)
    comm.send(text.data() + at, std::min(kTextPiece, text.size() - at), peer, tag, timeout);
}

std::string recv_text(Comm& comm, int peer, int tag, Seconds timeout, std::uint64_t limit,
                      const std::string& what) {
  std::uint64_t n = 0;
  recv_exact(comm, &n, sizeof n, peer, tag, timeout, "the length of " + what);
  if (n > limit)
    throw Error(detail::concat(comm.where(), ": rank ", peer, " sent a length of ", n,
                               " bytes for ", what, " (tag ", tag, "), more than the ", limit,
                               " it can be"));
  std::string text;
  try {
    for (std::uint64_t at = 0; at < n; at += kTextPiece) {  // memory only for bytes that came
      const std::size_t piece =
          static_cast<std::size_t>(std::min<std::uint64_t>(kTextPiece, n - at));
      text.resize(static_cast<std::size_t>(at) + piece);
      recv_exact(comm, text.data() + at, piece, peer, tag, timeout, what);
    }
  } catch (...) {
    keep_if_left_to_mpi(text);  // a piece let go unfinished may still be written (kept_memory.h)
    throw;
  }
  return text;
}

namespace {

std::string first_error_exchange(Comm& comm, const std::string& mine, int tag, Seconds timeout) {
  const int n = comm.size(), r = comm.rank();
  const char* what = "an error message (first_error)";
  if (r != 0) {  // to rank 0: my message; from rank 0: the first
    send_text(comm, mine, 0, tag, timeout);
    return recv_text(comm, 0, tag, timeout, kMaxNoteBytes, what);
  }
  std::string first = mine;
  for (int p = 1; p < n; ++p) {
    std::string theirs = recv_text(comm, p, tag, timeout, kMaxNoteBytes, what);
    if (first.empty()) first = std::move(theirs);
  }
  for (int p = 1; p < n; ++p) send_text(comm, first, p, tag, timeout);
  return first;
}

}  // namespace

// A rank that never takes part (stopped while it loaded its data) left the other ranks' errors
// naming rank 0, which they wait for: a census (common/census.h) names the silent one. Its notes
// go out on arrival, not at the timeout: ranks get here as far apart as their loading took
// (seconds on a loaded machine), and a census taken at the timeout, over a fixed 1.5 s, named a
// rank that arrived 2 s after this one as 'did not' beside the silent one. Every rank's note is
// in once the exchange is done (rank 0 heard from every rank, the others from rank 0 after
// that), so on success each rank takes the notes of the others, one per rank (per peer, in
// order: a fast rank's note for a later call cannot stand in for a slow one's).
std::string first_error(Comm& comm, const std::string& mine, int tag, Seconds timeout) {
  census_announce(comm, tags::kArrival);
  std::string first;
  try {
    first = first_error_exchange(comm, mine, tag, timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError(e.what() + census_heard(comm, tags::kArrival, census_grace(timeout),
                                               "got here", "get here"));
  }
  int note = 0;
  for (int p = 0; p < comm.size(); ++p)
    if (p != comm.rank()) comm.recv(&note, sizeof note, p, tags::kArrival, timeout);
  return first;
}

void barrier_over_p2p(Comm& comm, Seconds timeout) {
  // Dissemination barrier: in round j every rank signals rank + 2^j and waits for rank - 2^j;
  // after ceil(log2 n) rounds every rank has (transitively) heard from every other.
  const int n = comm.size(), r = comm.rank();
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  char out = 0, in = 0;
  int round = 0;
  for (int k = 1; k < n; k *= 2, ++round) {
    comm.sendrecv(&out, 1, (r + k) % n, &in, 1, (r - k + n) % n, tags::kBarrier + round,
                  remaining(deadline));
  }
}

}  // namespace starring
