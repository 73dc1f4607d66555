#include "common/inproc_comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

#include "common/comm_util.h"
#include "common/error.h"

namespace starring {

// The shared mailboxes behind inproc_comm.h's forward declaration. Its parts are nested in it so
// that they have its linkage: a type with linkage holding one from an anonymous namespace is
// what GCC's -Wsubobject-linkage reports when this file is compiled in a unity batch.
struct InProcState {
  struct Message {
    int source, tag;
    std::vector<char> data;
  };

  // A posted receive; shared between the waiting request and the mailbox.
  struct Posted {
    int source = 0, tag = 0;
    void* buf = nullptr;
    std::size_t capacity = 0;
    bool done = false;
    RecvStatus status;
    std::string error;  // set instead of done data when the message did not fit
  };

  struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Message> unexpected;
    std::list<std::shared_ptr<Posted>> posted;
  };

  explicit InProcState(int n) : boxes(n) {}
  std::vector<Mailbox> boxes;
  std::mutex abort_mu;
  std::string abort_reason;  // non-empty once aborted
  std::atomic<bool> aborted{false};
};

namespace {

using Message = InProcState::Message;
using Posted = InProcState::Posted;
using Mailbox = InProcState::Mailbox;

bool matches(int want_source, int want_tag, int source, int tag) {
  return want_tag == tag && (want_source == kAnySource || want_source == source);
}

// Copies a message into a posted receive (under the mailbox lock).
void deliver(Posted& p, int source, const void* data, std::size_t bytes, int rank) {
  if (bytes > p.capacity) {
    p.error = detail::concat("rank ", rank, ": message of ", bytes, " bytes from rank ", source,
                             " (tag ", p.tag, ") truncated: receive buffer holds ", p.capacity);
  } else if (bytes) {
    std::memcpy(p.buf, data, bytes);
  }
  p.status.source = source;
  p.status.bytes = bytes;
  p.done = true;
}

class InProcComm;

class InProcSend : public Request {
 public:
  bool test() override { return true; }
  RecvStatus wait(Seconds) override { return {}; }
  RecvStatus status() const override { return {}; }
};

class InProcRecv : public Request {
 public:
  InProcRecv(InProcComm* comm, std::shared_ptr<Posted> p) : comm_(comm), p_(std::move(p)) {}
  ~InProcRecv() override;
  bool test() override;
  bool may_be_done() override;
  RecvStatus wait(Seconds timeout) override;
  RecvStatus status() const override { return p_->status; }

 private:
  void finish();  // counts bytes once, throws on truncation
  InProcComm* comm_;
  std::shared_ptr<Posted> p_;
  bool counted_ = false;
};

class InProcComm : public Comm {
 public:
  InProcComm(std::shared_ptr<InProcState> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(s_->boxes.size()); }

  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    check_peer(peer, false);
    count_sent(bytes);  // before the peer can have it (see Comm::counters)
    Mailbox& box = s_->boxes[peer];
    {
      std::lock_guard<std::mutex> lk(box.mu);
      auto it = std::find_if(box.posted.begin(), box.posted.end(),
                             [&](auto& p) { return matches(p->source, p->tag, rank_, tag); });
      if (it != box.posted.end()) {
        deliver(**it, rank_, buf, bytes, peer);
        box.posted.erase(it);
      } else {
        const char* b = static_cast<const char*>(buf);
        box.unexpected.push_back(Message{rank_, tag, std::vector<char>(b, b + bytes)});
      }
    }
    box.cv.notify_all();
    return std::make_unique<InProcSend>();
  }

  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    check_peer(peer, true);
    auto p = std::make_shared<Posted>();
    p->source = peer;
    p->tag = tag;
    p->buf = buf;
    p->capacity = bytes;
    Mailbox& box = mailbox();
    std::lock_guard<std::mutex> lk(box.mu);
    auto it = std::find_if(box.unexpected.begin(), box.unexpected.end(),
                           [&](const Message& m) { return matches(peer, tag, m.source, m.tag); });
    if (it != box.unexpected.end()) {
      deliver(*p, it->source, it->data.data(), it->data.size(), rank_);
      box.unexpected.erase(it);
    } else {
      box.posted.push_back(p);
    }
    return std::make_unique<InProcRecv>(this, std::move(p));
  }

  void barrier(Seconds timeout) override { barrier_over_p2p(*this, timeout); }

  Mailbox& mailbox() { return s_->boxes[rank_]; }
  InProcState& state() { return *s_; }
  void counted_recv(std::size_t bytes) { count_recv(bytes); }

 private:
  void check_peer(int peer, bool any_ok) const {
    STARRING_CHECK((any_ok && peer == kAnySource) || (peer >= 0 && peer < size()), where(),
                   ": peer rank ", peer, " out of range (size ", size(), ")");
  }
  std::shared_ptr<InProcState> s_;
  int rank_;
};

InProcRecv::~InProcRecv() {
  Mailbox& box = comm_->mailbox();
  std::lock_guard<std::mutex> lk(box.mu);
  if (!p_->done) box.posted.remove(p_);  // abandoned: never written into afterwards
}

void InProcRecv::finish() {
  if (!p_->error.empty()) throw Error(p_->error);
  if (!counted_) comm_->counted_recv(p_->status.bytes);
  counted_ = true;
}

bool InProcRecv::test() {
  Mailbox& box = comm_->mailbox();
  {
    std::lock_guard<std::mutex> lk(box.mu);
    if (!p_->done) return false;
  }
  finish();
  return true;
}

bool InProcRecv::may_be_done() {
  std::lock_guard<std::mutex> lk(comm_->mailbox().mu);
  return p_->done;
}

RecvStatus InProcRecv::wait(Seconds timeout) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  Mailbox& box = comm_->mailbox();
  InProcState& st = comm_->state();
  {
    std::unique_lock<std::mutex> lk(box.mu);
    bool ok = box.cv.wait_until(lk, deadline, [&] { return p_->done || st.aborted.load(); });
    if (!p_->done) {
      box.posted.remove(p_);
      std::string op = describe_op(false, p_->source, p_->tag);
      if (!ok) throw TimeoutError(timeout_message(*comm_, timeout, op));
      std::lock_guard<std::mutex> alk(st.abort_mu);
      throw Error(comm_->where() + ": aborted in " + op + ": " + st.abort_reason);
    }
  }
  finish();
  return p_->status;
}

}  // namespace

InProcWorld::InProcWorld(int n) : n_(n), state_(std::make_shared<InProcState>(n)) {
  STARRING_CHECK(n >= 1, "InProcWorld needs at least one rank, got ", n);
  for (int r = 0; r < n; ++r) comms_.push_back(std::make_shared<InProcComm>(state_, r));
}

InProcWorld::~InProcWorld() = default;

std::shared_ptr<Comm> InProcWorld::comm(int rank) { return comms_.at(rank); }

void InProcWorld::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(state_->abort_mu);
    if (state_->aborted) return;
    state_->abort_reason = why;
    state_->aborted = true;
  }
  for (auto& box : state_->boxes) {
    std::lock_guard<std::mutex> lk(box.mu);  // pairs with the waiters' predicate check
    box.cv.notify_all();
  }
}

void run_ranks(int n, const std::function<void(Comm&)>& fn, Seconds timeout) {
  InProcWorld world(n);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = world.comm(r);
      comm->set_timeout(timeout);
      try {
        fn(*comm);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!first) first = std::current_exception();
        }
        world.abort("rank " + std::to_string(r) + " failed: " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace starring
