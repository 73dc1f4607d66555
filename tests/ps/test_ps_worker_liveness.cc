// A PS worker's reply deadlines, driven over an InProcWorld (rank 0: a PsWorker; rank 1: its
// server, a ServerLoop on a thread or the test thread by hand):
//  - a worker whose comm thread stood still for longer than the deadline (here: parked inside
//    its Comm, as a descheduled or stopped rank would be) while the server's reply arrived does
//    not name the server: before the fix it threw "timeout ... waiting for server rank 1" with
//    the reply already waiting to be polled (the worker-side twin of test_ps_liveness);
//  - a server that really does not reply is named by rank, with the chunk and step waited for;
//  - check_peers (a trainer's barrier timed out) asks the servers for the parameters within the
//    grace: a compute thread that stood still past it right after a poll does not name a server
//    whose answer arrived meanwhile (it named it, the answer waiting);
//  - restoring a checkpoint's optimizer state (kSetState, each acknowledged) waits --timeout +
//    grace, as the start's acknowledgements, and names the server that did not acknowledge; it
//    waited 2 x (--timeout + grace) and named none;
//  - co-located, an own shard that fails before its start acknowledgement without telling its
//    worker (no kAbort: its loop never ran) ends the worker's start at once with its error; the
//    worker waited --timeout + grace and then named the shard as silent.
// The reply is in the worker's queue before its comm thread may look at it (the server's send
// is watched), so neither case depends on how fast the machine is; the only waits are the stall
// itself, longer than the deadline, and the real deadline of the silent-server case.
// What the worker's buffers do after it gave up (a late answer, sends left in flight):
// test_ps_worker_buffers.cc; the shared harness: tests/ps/ps_worker_harness.h.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "common/error.h"
#include "common/inproc_comm.h"
#include "ps/ps_worker.h"
#include "ps/server_loop.h"
#include "tests/ps/forwarding_comm.h"
#include "tests/ps/park_gate.h"
#include "tests/ps/ps_worker_harness.h"

namespace starring::ps {
namespace {

using namespace worker_harness;

// Forwards to another Comm. With `park`, the first poll of a control-message receive after a
// reply receive was posted blocks until release(): the worker's comm thread stands still with a
// push in flight. replied() says the owner has sent a reply (InProc sends are delivered at once).
class WatchedComm : public ForwardingComm {
 public:
  WatchedComm(std::shared_ptr<Comm> inner, bool park)
      : ForwardingComm(std::move(inner)), park_(park) {}
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    auto r = inner().isend(buf, bytes, peer, tag);
    if (tag >= kReplyTagBase) gate_.set([&] { replied_ = true; });
    return r;
  }
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    if (tag >= kReplyTagBase) gate_.set([&] { armed_ = park_; });
    std::function<void()> before;
    if (tag == kCtlTag) before = [this] { gate_.park_if([&] { return armed_; }); };
    return std::make_unique<HookedRecv>(inner().irecv(buf, bytes, peer, tag), std::move(before),
                                        nullptr);
  }

  bool wait_parked() { return gate_.wait_parked(); }
  bool wait_replied() {
    return gate_.wait_for([&] { return replied_; });
  }
  void release() { gate_.release(); }

 private:
  const bool park_;
  ParkGate gate_{kWait};
  bool armed_ = false, replied_ = false;  // under gate_'s lock
};

TEST(PsWorkerLiveness, AStoppedCommThreadDoesNotNameAServerWhoseReplyIsWaiting) {
  InProcWorld world(2);
  const PsGroup group = make_ps_group("1", 2);
  auto worker_comm = std::make_shared<WatchedComm>(world.comm(0), true);
  auto server_comm = std::make_shared<WatchedComm>(world.comm(1), false);
  std::string server_error;
  std::thread server = run_server(server_comm, group, server_error);
  std::vector<float> p(kFloats, 1.0f), g(kFloats, 0.0f);
  std::string error;
  {
    PsWorker ps(worker_comm, group, worker_options());
    try {
      ps.start(layout(), {p.data(), g.data(), false, nullptr}, sgd());
      push_step_1(ps, g);
      // The comm thread parks with the push in flight; the server replies; the comm thread stays
      // parked for twice its deadline, then looks again.
      const bool parked = worker_comm->wait_parked();
      EXPECT_TRUE(parked);
      if (parked) EXPECT_TRUE(server_comm->wait_replied());
      if (parked) std::this_thread::sleep_for(kDeadline * 2);
      worker_comm->release();
      ps.wait_params(0);
      ps.shutdown();
    } catch (const std::exception& e) {
      error = e.what();
      worker_comm->release();
    }
  }
  server.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(p, std::vector<float>(kFloats, 0.75f));  // 1 - 0.5 x 0.5
  if (error.empty()) EXPECT_EQ(server_error, "");
}

TEST(PsWorkerLiveness, AServerThatDoesNotReplyIsNamedByRank) {
  InProcWorld world(2);
  const std::string error = push_to_a_silent_server(world, world.comm(0));
  std::printf("the worker said: %s\n", error.c_str());
  for (const char* part : {"rank 0 (worker 0): timeout after 0.2 s waiting for server rank 1: ",
                           "no reply to the push of chunk 0 (step 1"})
    EXPECT_NE(error.find(part), std::string::npos) << part << "\nnot in: " << error;
}

// Forwards to another Comm. The first poll of a receive on `tag` finds nothing and then stands
// still for `stall`, and longer until the answer is there (the inner receive is not completed):
// its owner was descheduled right after a poll that found nothing, while the answer arrived.
class StallOnceComm : public ForwardingComm {
 public:
  StallOnceComm(std::shared_ptr<Comm> inner, int tag, Seconds stall)
      : ForwardingComm(std::move(inner)), tag_(tag), stall_(stall) {}
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    auto r = inner().irecv(buf, bytes, peer, tag);
    if (tag != tag_) return r;
    return std::make_unique<Stalled>(std::move(r), this);
  }

 private:
  class Stalled : public Request {
   public:
    Stalled(std::unique_ptr<Request> r, StallOnceComm* c) : r_(std::move(r)), c_(c) {}
    bool test() override {
      if (!c_->stalled_.exchange(true)) {
        std::this_thread::sleep_for(c_->stall_);
        const auto until = std::chrono::steady_clock::now() + kWait;
        while (!r_->may_be_done() && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return false;
      }
      return r_->test();
    }
    bool may_be_done() override { return r_->may_be_done(); }
    RecvStatus wait(Seconds timeout) override { return r_->wait(timeout); }
    RecvStatus status() const override { return r_->status(); }

   private:
    std::unique_ptr<Request> r_;
    StallOnceComm* c_;
  };
  const int tag_;
  const Seconds stall_;
  std::atomic<bool> stalled_{false};
};

// check_peers (a barrier of the trainer's timed out) asks the servers for the parameters within
// the grace (0.5 s here). A compute thread that stood still past it right after a poll, while the
// server's answer arrived, must look again before it names the server (before the fix: "timeout
// after 0.5 s waiting for the parameters of chunk 0 from server rank 1", the answer waiting).
TEST(PsWorkerCheckPeers, AStoppedComputeThreadDoesNotNameAServerWhoseAnswerIsWaiting) {
  InProcWorld world(2);
  const PsGroup group = make_ps_group("1", 2);
  auto worker_comm = std::make_shared<StallOnceComm>(world.comm(0), kStateTag, kDeadline);
  std::string server_error;
  std::thread server = run_server(world.comm(1), group, server_error);
  std::vector<float> p(kFloats, 1.0f), g(kFloats, 0.0f);
  std::string error;
  {
    PsWorker ps(worker_comm, group, worker_options());
    try {
      ps.start(layout(), {p.data(), g.data(), false, nullptr}, sgd());
      ps.check_peers();
      ps.shutdown();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  server.join();
  EXPECT_EQ(error, "");
  if (error.empty()) EXPECT_EQ(server_error, "");
}

// Two servers: rank 1 a real one, rank 2 one that acknowledges the start and nothing after (the
// optimizer state it is sent is never acknowledged: stopped or stuck after its start).
TEST(PsWorkerRestore, AServerThatDoesNotAcknowledgeTheStateIsNamedWithinTheDeadline) {
  InProcWorld world(3);
  const PsGroup group = make_ps_group("2", 3);
  std::string server_error;
  std::thread server = run_server(world.comm(1), group, server_error);
  std::thread silent([&] {
    PsHeader h;
    h.op = Op::kAck;
    world.comm(2)->send(&h, sizeof(h), 0, kCtlTag, kWait);
  });
  PsWorkerOptions o = worker_options();
  o.chunk_bytes = kFloats / 2 * sizeof(float);  // two chunks: one for each server
  std::vector<float> p(kFloats, 1.0f), g(kFloats, 0.0f);
  std::string error;
  {
    PsWorker ps(world.comm(0), group, o);
    try {
      ps.start(layout(), {p.data(), g.data(), false, nullptr}, sgd());
      ps.load_optimizer_state(std::vector<float>(kFloats, 0.25f), {});
    } catch (const TimeoutError& e) {
      error = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a timeout: " << e.what();
    }
    silent.join();
    try {
      ps.shutdown();  // rank 2 says no goodbye either: a timeout
    } catch (const std::exception&) {
    }
  }
  server.join();
  std::printf("the worker said: %s\n", error.c_str());
  for (const char* part :
       {"rank 0 (worker 0): timeout after 0.7 s waiting for the servers to restore the optimizer "
        "state",
        "; no acknowledgement of the optimizer state from server rank 2 (stopped, stuck or slow)"})
    EXPECT_NE(error.find(part), std::string::npos) << part << "\nnot in: " << error;
  EXPECT_EQ(error.find("rank 1"), std::string::npos) << error;  // it acknowledged
  EXPECT_EQ(server_error, "");
}

// Forwards to another Comm; posting a request receive (kReqTag: only a server posts those)
// fails, as an MPI error would there. Co-located, that is this process's own shard, which then
// ends before its loop runs: it tells its worker nothing (no kAbort), only its thread's error is
// left (PsWorker's server_error_).
class FailingServerComm : public ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    if (tag == kReqTag) throw Error("server rank 0: posting a receive failed (injected)");
    return inner().irecv(buf, bytes, peer, tag);
  }
};

// Before the fix: "timeout after 7.5 s waiting for the servers' start acknowledgements ...; no
// start acknowledgement from server rank 0 (stopped, stuck or slow)", the shard long gone.
TEST(PsWorkerStart, AnOwnShardThatFailedEndsTheWaitForAcknowledgementsAtOnce) {
  InProcWorld world(1);
  auto comm = std::make_shared<FailingServerComm>(world.comm(0));
  PsWorkerOptions o = worker_options();
  o.timeout = Seconds(5.0);  // the wait: 5 + 2.5 s (grace)
  std::vector<float> p(kFloats, 1.0f), g(kFloats, 0.0f);
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  {
    PsWorker ps(comm, make_ps_group("colocated", 1), o);
    try {
      ps.start(layout(), {p.data(), g.data(), false, nullptr}, sgd());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const Seconds took = std::chrono::steady_clock::now() - t0;
  EXPECT_NE(error.find("server rank 0: posting a receive failed (injected)"), std::string::npos)
      << error;
  EXPECT_LT(took.count(), o.timeout.count()) << error;
}

}  // namespace
}  // namespace starring::ps
