// HoldSendsComm: a Comm that forwards to another one, except the sends a test picks: those never
// complete (sent to a dead or stopped peer) and are remembered, so that the test can read their
// buffers afterwards, as MPI may read a send left in flight (a stopped peer that goes on, the
// sender's own progress). Used by the tests of a failing worker's buffers (test_ps_worker_buffers)
// and of an aborting server's (test_ps_server_sends): a buffer freed under a held send reads
// garbage there (in Release, glibc's free list writes over its first 16 bytes; ASan:
// heap-use-after-free).
#pragma once
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "common/comm_util.h"
#include "common/error.h"
#include "ps/protocol.h"
#include "tests/ps/forwarding_comm.h"

namespace starring::ps {

class HoldSendsComm : public ForwardingComm {
 public:
  // Whether to hold a send (`op`: its header's, for a message that carries one: a request, a
  // control or a state message; otherwise unset: a push's reply).
  using Pick = std::function<bool(int tag, std::optional<Op> op)>;
  HoldSendsComm(std::shared_ptr<Comm> inner, Pick pick)
      : ForwardingComm(std::move(inner)), pick_(std::move(pick)) {}
  // Holds the sends of a request (kReqTag) whose op is in `ops`.
  HoldSendsComm(std::shared_ptr<Comm> inner, std::vector<Op> ops)
      : HoldSendsComm(std::move(inner), [ops = std::move(ops)](int tag, std::optional<Op> op) {
          return tag == kReqTag && op && std::find(ops.begin(), ops.end(), *op) != ops.end();
        }) {}

  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    std::optional<Op> op;
    if (tag < kReplyTagBase && bytes >= sizeof(PsHeader))
      op = static_cast<const PsHeader*>(buf)->op;
    if (!pick_(tag, op)) return inner().isend(buf, bytes, peer, tag);
    std::lock_guard<std::mutex> lk(mu_);
    held_.push_back({tag, op, peer, buf, bytes});
    return std::make_unique<Held>(*this, peer, tag);
  }

  // The header of the `nth` held send of `op` (to `peer`, unless -1) as that send would read it
  // now (nullopt: none was held).
  std::optional<PsHeader> read_held(Op op, int peer = -1, int nth = 0) const {
    std::lock_guard<std::mutex> lk(mu_);
    for (const Send& s : held_)
      if (s.op == op && (peer < 0 || s.peer == peer) && nth-- == 0) {
        PsHeader h;
        std::memcpy(&h, s.buf, sizeof h);
        return h;
      }
    return std::nullopt;
  }
  // The floats of the first held send on `tag` to `peer` as it would read them now (empty: none).
  std::vector<float> read_floats(int tag, int peer) const {
    std::lock_guard<std::mutex> lk(mu_);
    for (const Send& s : held_)
      if (s.tag == tag && s.peer == peer) {
        std::vector<float> v(s.bytes / sizeof(float));
        std::memcpy(v.data(), s.buf, v.size() * sizeof(float));
        return v;
      }
    return {};
  }

 private:
  // A wait runs out as MpiRequest's does, with its words.
  class Held : public Request {
   public:
    Held(const Comm& comm, int peer, int tag) : comm_(comm), peer_(peer), tag_(tag) {}
    bool test() override { return false; }
    bool may_be_done() override { return false; }
    RecvStatus wait(Seconds timeout) override {
      std::this_thread::sleep_for(timeout);
      throw TimeoutError(timeout_message(comm_, timeout, describe_op(true, peer_, tag_)));
    }
    RecvStatus status() const override { return {}; }

   private:
    const Comm& comm_;
    const int peer_, tag_;
  };
  struct Send {
    int tag;
    std::optional<Op> op;
    int peer;
    const void* buf;
    std::size_t bytes;
  };
  const Pick pick_;
  mutable std::mutex mu_;
  std::vector<Send> held_;  // in the order sent
};

}  // namespace starring::ps
