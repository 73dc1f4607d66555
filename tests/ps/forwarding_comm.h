// ForwardingComm: a Comm that forwards to another one, for the liveness tests' wrappers that
// slow down or stand still their owner's polling loop (test_ps_liveness, test_ps_worker_liveness).
// A subclass overrides isend/irecv where it watches traffic and wraps receives in HookedRecv,
// whose hooks run on the owner's thread: before() at every poll (test()), completed() once,
// the first time the owner finds the receive complete (by test() or wait()).
#pragma once
#include <functional>
#include <memory>
#include <utility>

#include "common/comm.h"

namespace starring::ps {

class ForwardingComm : public Comm {
 public:
  explicit ForwardingComm(std::shared_ptr<Comm> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    return inner_->isend(buf, bytes, peer, tag);
  }
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    return inner_->irecv(buf, bytes, peer, tag);
  }
  void barrier(Seconds timeout) override { inner_->barrier(timeout); }

 protected:
  Comm& inner() { return *inner_; }

 private:
  std::shared_ptr<Comm> inner_;
};

class HookedRecv : public Request {
 public:
  HookedRecv(std::unique_ptr<Request> r, std::function<void()> before,
             std::function<void()> completed)
      : r_(std::move(r)), before_(std::move(before)), completed_(std::move(completed)) {}
  bool test() override {
    if (before_) before_();
    const bool done = r_->test();
    if (done) once();
    return done;
  }
  RecvStatus wait(Seconds timeout) override {
    const RecvStatus s = r_->wait(timeout);
    once();
    return s;
  }
  RecvStatus status() const override { return r_->status(); }

 private:
  void once() {
    if (!counted_ && completed_) completed_();
    counted_ = true;
  }
  std::unique_ptr<Request> r_;
  std::function<void()> before_, completed_;
  bool counted_ = false;
};

}  // namespace starring::ps
