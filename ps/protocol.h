// The parameter-server wire protocol.
//
// Worker -> server messages travel on one tag (kReqTag), each one buffer: a 32-byte PsHeader
// followed by a payload (floats of one chunk, or text). The server posts a few receives from any
// source on that tag and handles messages in arrival order (per worker, the MPI order).
//   kInit        text: JSON PsInitSpec (every worker sends it; the server checks they agree)
//   kInitParams  floats: initial parameters of one chunk (worker 0 only)
//   kPush        floats: one chunk of gradient for `step`, with that step's learning rate
//   kHeartbeat   this worker is alive and blocked waiting on some server (sent every
//                timeout/4 while it has replies outstanding, so that a worker stalled by ANOTHER
//                server is not mistaken for a silent one), or on a slower worker at a meeting
//                of the workers (asp/ssp: an evaluation, a checkpoint, the end of the run), or
//                its trainer shows signs of life in a step longer than that
//                (common/thread_pulse.h: computing, or a --straggler's sleep); sent only to
//                the servers this worker sent nothing else for timeout/4
//   kDone        clean shutdown: this worker has nothing more to push; no heartbeat follows it
//                (ServerLoop::finish cancels its receives; only a failure's kAbort may)
//   kAbort       text: this worker failed (`step` 1: by a timeout, so the server stops with a
//                TimeoutError; 0: any other failure); the server stops and tells every worker why
//   kGetState    after every worker flushed: send me `chunk`'s parameters and its first `step`
//                optimizer-state vectors; the server answers with one kState message per
//                vector: step 0 the parameters, 1 momentum / Adam m, 2 Adam v. Checkpoints
//                (worker 0 only) ask for every vector; an evaluation under asp/ssp (any worker)
//                for the parameters alone (step 0)
//   kSetState    floats: optimizer state vector `step` (1: momentum / Adam m, 2: Adam v) of
//                `chunk` (worker 0 only, on resume, before any push); answered with kAck
// Server -> worker:
//   a reply to a push is the chunk's updated parameters, raw floats with no header, on tag
//   kReplyTagBase + chunk id, received straight into the worker's parameter buffer;
//   kAck (start accepted), kBye (text: the server's JSON statistics) and kAbort (text: why the
//   server stopped; `step` 1 when it was a timeout) travel on kCtlTag with a header; so does
//   kHeartbeat (bsp and ssp, no payload: this server holds replies of the worker back for a
//   slower, live one; sent every timeout/4 while it does, it renews the worker's reply deadlines);
//   kState (header + floats: vector `step` of `chunk`) travels on kStateTag, in the order
//   the kGetState requests arrived.
// Shared memory (ps/shared_segment.h), between a worker and a server on the same host: the
// worker's kInit carries its segment ({"shm": ...}, left out of what the workers must agree on);
// the start kAck's text says whether the server maps it and where the server's parameters are
// ({"reads_shm": true, "shm": ...}). Then a kPush may come with no payload (count floats, 0
// bytes): the chunk is at its offset in the worker's segment, untouched until its reply. The
// reply to such a push, when its values are stable (bsp), is an empty message: the worker copies
// the chunk from the same offset in the server's segment (unchanged until its next push).
// Keys are chunk ranges [begin, begin + count); no per-element keys are ever sent.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/kept_memory.h"
#include "common/optimizer.h"

namespace starring::ps {

inline constexpr int kReqTag = tags::kPsBase + 0;
inline constexpr int kCtlTag = tags::kPsBase + 1;
inline constexpr int kStateTag = tags::kPsBase + 2;
inline constexpr int kReplyTagBase = tags::kPsBase + 16;
inline constexpr int kMaxChunks = tags::kBenchBase - kReplyTagBase;

enum class Op : std::uint32_t {
  kInit = 1,
  kInitParams,
  kPush,
  kDone,
  kAbort,
  kAck,
  kBye,
  kHeartbeat,
  kGetState,
  kSetState,
  kState
};
const char* op_name(Op op);

struct PsHeader {
  std::uint32_t magic = kMagic;
  Op op = Op::kPush;
  std::int32_t worker = 0;  // worker index (0..W-1) of the sender, or the server index
  std::int32_t chunk = -1;  // kPush, kInitParams, kGetState, kSetState, kState
  // kPush: the step; kGetState: the state vectors wanted besides the parameters; kState: which
  // vector (0 parameters, 1 momentum / Adam m, 2 Adam v); kSetState: 1 or 2 as there; kAbort: 1
  // for a timeout.
  std::int64_t step = 0;
  float lr = 0;             // kPush: that step's learning rate
  std::uint32_t count = 0;  // floats (chunks) or bytes (text) in the payload
  static constexpr std::uint32_t kMagic = 0x53505352;  // "RSPS"
};
static_assert(sizeof(PsHeader) == 32, "PsHeader must stay 32 bytes (payload alignment)");

// Capacity of one worker -> server message: header + max(chunk bytes, 1 MiB for text).
std::size_t max_request_bytes(std::size_t chunk_bytes);
inline constexpr std::size_t kMaxCtlBytes = 1 << 20;  // server -> worker control messages

// A message buffer: header + payload (h.count is the caller's to set).
std::vector<char> make_message(const PsHeader& h, const void* payload, std::size_t payload_bytes);
// Header + text, with h.count set; the text is cut to fit kMaxCtlBytes (a control message's
// receive buffer), so a message bound for a larger buffer (kInit) is built with make_message.
std::vector<char> make_text_message(PsHeader h, const std::string& text);
// The header at the start of a received message (a reference into `buf`); throws Error naming
// `where` when the message is shorter than a header or its magic is wrong.
const PsHeader& header_of(const char* buf, std::size_t bytes, const std::string& where);
// The payload after the header as text ("" when there is none).
std::string text_of(const char* buf, std::size_t bytes);

struct PsChunkRef {
  int id = 0;
  std::size_t begin = 0;
  std::size_t count = 0;
};

// What a worker tells a server at start; every worker sends it and all must agree.
struct PsInitSpec {
  int num_workers = 0;
  int server_index = 0;
  std::size_t total = 0;  // floats in the flat buffer
  std::size_t chunk_bytes = 0;
  std::string consistency = "bsp";
  int staleness = 0;
  std::string update = "optimizer";  // "optimizer" | "sum" (push+pull bench: params = sum)
  OptimizerConfig opt;
  std::vector<PsChunkRef> chunks;  // the chunks this server owns

  nlohmann::json to_json() const;
  static PsInitSpec from_json(const nlohmann::json& j);
};

// The rule PendingSends follows, for a buffer whose sends are released elsewhere (a worker's
// push staging, heartbeat and abort messages): a send that is not complete when
// its request is released may still be read by MPI afterwards (a send matched late by a stopped
// peer that goes on), so its buffer is kept until the process ends (the job is ending) instead of
// freed under it. release_unfinished releases `req` (null: nothing) and says whether its send
// was not complete (a failing test counts as not complete); keep_for_process
// (common/kept_memory.h) keeps `buf`. Neither throws.
bool release_unfinished(std::unique_ptr<Request>& req) noexcept;

// A worker's batch of messages sent at once (the start, the optimizer state, the state requests
// of a checkpoint, an evaluation or check_peers), each with its buffer. An error that unwinds
// before wait() (a server's acknowledgement, a send or an answer timed out) releases the
// requests, and MPI may still read a buffer afterwards (a send matched late, by a stopped server
// that goes on): the buffers of sends not complete by then are kept until the process ends (the
// job is ending) instead of freed under it.
class PendingSends {
 public:
  explicit PendingSends(Comm& comm) : comm_(comm) {}
  ~PendingSends();
  PendingSends(const PendingSends&) = delete;
  PendingSends& operator=(const PendingSends&) = delete;
  void send(std::vector<char> msg, int dst, int tag);
  void wait(Seconds timeout);  // every send, each within `timeout` (throws TimeoutError)

 private:
  Comm& comm_;
  std::vector<std::unique_ptr<std::vector<char>>> msgs_;
  std::vector<std::unique_ptr<Request>> reqs_;  // reqs_[i] sends *msgs_[i]
};

}  // namespace starring::ps
