// OwnershipComm: a Comm over another one (an InProcComm in the tests) that enforces MPI's rule on
// buffers, which a transport that copies at once (InProcComm, an eager MPI send) never shows: a
// send's buffer belongs to the transport until its request has been seen complete (test() true,
// or wait()), a receive's buffer until the receive has. Posting a receive into memory that an
// unfinished send reads, or a send from memory that an unfinished receive will write, throws
// Error naming both ranges. Sends (delivered at once by the inner Comm) report completion only
// from their second test(): MPI too learns that a send is done only while it is progressed, so a
// caller that reuses a buffer on the strength of "the peer must have it by now" is caught.
// Several unfinished sends may read the same memory (MPI allows it).
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "common/comm.h"
#include "common/error.h"

namespace starring::test {

class OwnershipComm : public Comm {
 public:
  explicit OwnershipComm(std::shared_ptr<Comm> inner) : inner_(std::move(inner)) {
    set_timeout(inner_->timeout());
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void barrier(Seconds timeout) override { inner_->barrier(timeout); }

  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    auto it = claim(buf, bytes, true, peer, tag);
    count_sent(bytes);
    return std::make_unique<Owned>(this, it, inner_->isend(buf, bytes, peer, tag), true);
  }
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    auto it = claim(buf, bytes, false, peer, tag);
    return std::make_unique<Owned>(this, it, inner_->irecv(buf, bytes, peer, tag), false);
  }

  // Unfinished operations now (0 once every request was completed or destroyed).
  std::size_t outstanding() {
    std::lock_guard<std::mutex> lk(mu_);
    return ranges_.size();
  }

 private:
  struct Range {
    std::uintptr_t lo, hi;
    bool send;
    int peer, tag;
  };
  using Iter = std::list<Range>::iterator;

  static std::string describe(const Range& r) {
    return detail::concat(r.send ? "send of [" : "receive into [", r.lo, ", ", r.hi, ") ",
                          r.send ? "to" : "from", " rank ", r.peer, " (tag ", r.tag, ")");
  }

  Iter claim(const void* buf, std::size_t bytes, bool send, int peer, int tag) {
    const auto lo = reinterpret_cast<std::uintptr_t>(buf);
    const Range mine{lo, lo + bytes, send, peer, tag};
    std::lock_guard<std::mutex> lk(mu_);
    for (const Range& r : ranges_) {
      if ((send && r.send) || r.lo >= mine.hi || mine.lo >= r.hi) continue;
      throw Error(detail::concat(where(), ": ", describe(mine), " overlaps the unfinished ",
                                 describe(r), ": that buffer still belongs to the transport"));
    }
    return ranges_.insert(ranges_.end(), mine);
  }
  void release(Iter it) {
    std::lock_guard<std::mutex> lk(mu_);
    ranges_.erase(it);
  }

  class Owned : public Request {
   public:
    Owned(OwnershipComm* c, Iter it, std::unique_ptr<Request> r, bool send)
        : c_(c), it_(it), r_(std::move(r)), send_(send) {}
    ~Owned() override {
      r_.reset();  // an unfinished receive is cancelled first
      if (!done_) c_->release(it_);
    }
    bool test() override {
      if (done_) return true;
      if (send_ && tests_++ == 0) return false;  // seen complete only when progressed again
      if (!r_->test()) return false;
      finish();
      return true;
    }
    bool may_be_done() override { return done_ || (!(send_ && tests_ == 0) && r_->may_be_done()); }
    RecvStatus wait(Seconds timeout) override {
      if (!done_) {
        r_->wait(timeout);
        finish();
      }
      return r_->status();
    }
    RecvStatus status() const override { return r_->status(); }

   private:
    void finish() {
      done_ = true;
      c_->release(it_);
    }
    OwnershipComm* c_;
    Iter it_;
    std::unique_ptr<Request> r_;
    bool send_, done_ = false;
    int tests_ = 0;
  };

  std::shared_ptr<Comm> inner_;
  std::mutex mu_;
  std::list<Range> ranges_;
};

}  // namespace starring::test
