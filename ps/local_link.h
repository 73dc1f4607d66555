// LocalLink: in co-located mode, the worker and the server shard living in the same process talk
// through this in-memory queue instead of the Comm: no bytes cross a link, nothing is copied
// for pushes (the server reads the worker's gradient buffer in place, which stays valid until
// the worker's reply for that chunk arrives), and replies are one memcpy into the worker's
// parameter buffer.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "ps/protocol.h"

namespace starring::ps {

struct LocalMsg {
  PsHeader h;
  const float* data = nullptr;  // kInitParams / kPush / kSetState: h.count floats
  std::string text;             // kInit / kAbort
};

class LocalLink {
 public:
  // worker -> server (thread-safe)
  void post(LocalMsg m) {
    std::lock_guard<std::mutex> lk(mu_);
    q_.push_back(std::move(m));
  }
  // server thread
  bool poll(LocalMsg& m) {
    std::lock_guard<std::mutex> lk(mu_);
    if (q_.empty()) return false;
    m = std::move(q_.front());
    q_.pop_front();
    return true;
  }

  // server -> worker, set by the worker before the server thread starts.
  float* worker_params = nullptr;
  std::function<void(int chunk)> on_reply;  // chunk written to params
  std::function<void(Op op, const std::string& text, bool timeout)> on_ctl;  // ack/bye/abort
  // kState: optimizer state vector h.step of chunk h.chunk (h.count floats at data). Set by the
  // worker before it posts its first kGetState.
  std::function<void(const PsHeader& h, const float* data)> on_state;
  // Bytes the server moved with other workers through shared segments (pushes it read, replies
  // they copied): this process's traffic as much as the messages the Comm counts.
  std::atomic<std::uint64_t> shm_recv{0}, shm_sent{0};
  // Bytes of set-up and checkpoint messages (the start spec, the initial parameters, a restored
  // checkpoint's state, state requests; also done and heartbeat messages) the server received
  // from other ranks: the Comm counts them, per-step traffic does not.
  std::atomic<std::uint64_t> setup_recv{0};
  // Bytes of the server's control and checkpoint messages to other ranks (start acks, bye, abort,
  // optimizer state): counted by the Comm, not per-step traffic either.
  std::atomic<std::uint64_t> ctl_sent{0};
  // Held by the server thread from a receive's completion (when the Comm counts it) to its
  // booking in setup_recv, and from booking a control message in ctl_sent to its send; held by
  // PsWorker::counters while it reads them and the Comm's counters, so a step's figures never
  // hold a message the Comm counted and the server has not booked yet (or the reverse).
  std::mutex count_mu;
  // count_mu held, or nothing when there is no link (a dedicated server, a worker without a shard).
  static std::unique_lock<std::mutex> counting(LocalLink* link) {
    return link ? std::unique_lock<std::mutex>(link->count_mu) : std::unique_lock<std::mutex>();
  }

 private:
  std::mutex mu_;
  std::deque<LocalMsg> q_;
};

}  // namespace starring::ps
