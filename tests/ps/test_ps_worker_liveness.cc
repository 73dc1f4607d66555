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
//  - co-located, an own shard that answers check_peers only after the grace (it stood still, then
//    went on) writes nothing: it wrote into check_peers' freed scratch buffer (glibc: "malloc():
//    unaligned tcache chunk detected", abort);
//  - check_peers' requests whose sends did not complete before it gave up keep their buffers (MPI
//    may read them later), and so do a failed worker's push, heartbeats and abort;
//  - restoring a checkpoint's optimizer state (kSetState, each acknowledged) waits --timeout +
//    grace, as the start's acknowledgements, and names the server that did not acknowledge; it
//    waited 2 x (--timeout + grace) and named none;
//  - co-located, an own shard that fails before its start acknowledgement without telling its
//    worker (no kAbort: its loop never ran) ends the worker's start at once with its error; the
//    worker waited --timeout + grace and then named the shard as silent.
// The reply is in the worker's queue before its comm thread may look at it (the server's send
// is watched), so neither case depends on how fast the machine is; the only waits are the stall
// itself, longer than the deadline, and the real deadline of the silent-server case.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/inproc_comm.h"
#include "ps/ps_worker.h"
#include "ps/server_loop.h"
#include "tests/ps/forwarding_comm.h"
#include "tests/ps/park_gate.h"

namespace starring::ps {
namespace {

constexpr std::size_t kFloats = 8;
constexpr Seconds kWait{60.0};  // the test's own waits: only a broken worker reaches them
constexpr Seconds kTimeout{0.2};
constexpr Seconds kDeadline{0.7};  // kTimeout + the worker's grace (at least 0.5 s)

// The server of these tests, on its own thread: not under test, so its timeout is the test's own
// wait (it never names the worker); what it threw, if anything, lands in `error`.
std::thread run_server(std::shared_ptr<Comm> comm, const PsGroup& group, std::string& error) {
  return std::thread([comm = std::move(comm), group, &error] {
    ServerOptions so;
    so.timeout = kWait;
    so.shared_memory = false;
    try {
      ServerLoop(comm, group, so).run();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
}

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

ParamLayout layout() {
  ParamLayout l;
  l.add_at("w", 0, {static_cast<int>(kFloats)});
  l.validate();
  return l;
}

PsWorkerOptions worker_options() {
  PsWorkerOptions o;
  o.timeout = kTimeout;
  o.shared_memory = false;
  return o;
}

OptimizerConfig sgd() {
  OptimizerConfig o;
  o.type = "sgd";
  return o;
}

// Step 1 of a one-tensor model: parameters all 1, gradient all 0.5, learning rate 0.5.
void push_step_1(PsWorker& ps, std::vector<float>& g) {
  ps.begin_step(1, 0.5f);
  g.assign(kFloats, 0.5f);
  ps.tensor_ready(0);
}

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

// Rank 0's worker (through `comm`) pushes step 1 to a server, rank 1 of `world`, that
// acknowledges the start and then never replies; returns the worker's timeout, after its shutdown.
std::string push_to_a_silent_server(InProcWorld& world, std::shared_ptr<Comm> comm) {
  const PsGroup group = make_ps_group("1", 2);
  std::vector<float> p(kFloats, 1.0f), g(kFloats, 0.0f);
  std::string error;
  {
    PsWorker ps(std::move(comm), group, worker_options());
    std::thread server([&] {  // acknowledges the start, then never replies
      PsHeader h;
      h.op = Op::kAck;
      world.comm(1)->send(&h, sizeof(h), 0, kCtlTag, kWait);
    });
    try {
      ps.start(layout(), {p.data(), g.data(), false, nullptr}, sgd());
      push_step_1(ps, g);
      ps.wait_params(0);
    } catch (const TimeoutError& e) {
      error = e.what();
    }
    server.join();
    try {
      ps.shutdown();
    } catch (const std::exception&) {
    }
  }
  return error;
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

// Forwards to another Comm; once park() was called, the owner's next poll of a request receive
// (kReqTag: only a server posts those) stands still until release(). Co-located, that is this
// process's own shard.
class ParkServerComm : public ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    std::function<void()> before;
    if (tag == kReqTag) before = [this] { gate_.park_if([&] { return armed_; }); };
    return std::make_unique<HookedRecv>(inner().irecv(buf, bytes, peer, tag), std::move(before),
                                        nullptr);
  }
  void park() {
    gate_.set([&] { armed_ = true; });
  }
  bool wait_parked() { return gate_.wait_parked(); }
  void release() { gate_.release(); }

 private:
  ParkGate gate_{kWait};
  bool armed_ = false;  // under gate_'s lock
};

// Co-located, one rank: check_peers names this process's own shard when it does not answer within
// the grace, and the shard's answer that comes after (it stood still, then went on) must land
// nowhere: it was written into check_peers' scratch buffer, freed by then (ASan:
// heap-use-after-free in PsWorker::on_state).
TEST(PsWorkerCheckPeers, ALocalShardThatAnswersAfterTheGraceWritesNowhere) {
  InProcWorld world(1);
  auto comm = std::make_shared<ParkServerComm>(world.comm(0));
  PsWorkerOptions o = worker_options();
  o.timeout = Seconds(1.0);  // the grace: 0.5 s
  std::vector<float> p(kFloats, 1.0f), g(kFloats, 0.0f);
  std::string error;
  {
    PsWorker ps(comm, make_ps_group("colocated", 1), o);
    ps.start(layout(), {p.data(), g.data(), false, nullptr}, sgd());
    comm->park();
    ASSERT_TRUE(comm->wait_parked());
    try {
      ps.check_peers();
    } catch (const TimeoutError& e) {
      error = e.what();
    }
    comm->release();  // the shard answers the check's request (queued before shutdown's kDone)
    try {
      ps.shutdown();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "shutdown: " << e.what();
    }
  }
  EXPECT_NE(error.find("waiting for the parameters of chunk 0 from server rank 0"),
            std::string::npos)
      << error;
  EXPECT_EQ(p, std::vector<float>(kFloats, 1.0f));
}

// Forwards to another Comm, except the sends of a request whose op is in `held`: never complete
// (a dead or stopped server), and the first of each op is remembered, so that the test can read
// its buffer afterwards, as MPI does when it moves a send left in flight.
class HoldSendsComm : public ForwardingComm {
 public:
  HoldSendsComm(std::shared_ptr<Comm> inner, std::vector<Op> held)
      : ForwardingComm(std::move(inner)), held_(std::move(held)) {}
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    const Op op = bytes >= sizeof(PsHeader) ? static_cast<const PsHeader*>(buf)->op : Op::kPush;
    if (tag != kReqTag || bytes < sizeof(PsHeader) ||
        std::find(held_.begin(), held_.end(), op) == held_.end())
      return inner().isend(buf, bytes, peer, tag);
    std::lock_guard<std::mutex> lk(mu_);
    bufs_.emplace(op, buf);  // the first of each op
    return std::make_unique<Held>();
  }
  // The header of the first held send of `op` as that send would read it now (nullopt: none).
  std::optional<PsHeader> read_held(Op op) const {
    std::lock_guard<std::mutex> lk(mu_);
    const auto it = bufs_.find(op);
    if (it == bufs_.end()) return std::nullopt;
    PsHeader h;
    std::memcpy(&h, it->second, sizeof h);
    return h;
  }

 private:
  struct Held : Request {
    bool test() override { return false; }
    bool may_be_done() override { return false; }
    RecvStatus wait(Seconds) override { throw TimeoutError("held send (test)"); }
    RecvStatus status() const override { return {}; }
  };
  const std::vector<Op> held_;
  mutable std::mutex mu_;
  std::map<Op, const void*> bufs_;
};

// check_peers' kGetState requests whose sends are not complete when it gives up (the grace
// passed) keep their buffers: MPI may still read them (a send matched late by a stopped server
// that goes on). They were freed when the timeout unwound (ASan: heap-use-after-free; glibc's
// free list wrote over the header: its chunk read -1143003690), as PendingSends now prevents for
// the start and the optimizer-state batches.
TEST(PsWorkerCheckPeers, AGetStateRequestNotSentWhenItGivesUpKeepsItsBuffer) {
  InProcWorld world(2);
  const PsGroup group = make_ps_group("1", 2);
  auto worker_comm = std::make_shared<HoldSendsComm>(world.comm(0), std::vector<Op>{Op::kGetState});
  std::string server_error;
  std::thread server = run_server(world.comm(1), group, server_error);
  std::vector<float> p(kFloats, 1.0f), g(kFloats, 0.0f);
  std::string error;
  {
    PsWorker ps(worker_comm, group, worker_options());
    ps.start(layout(), {p.data(), g.data(), false, nullptr}, sgd());
    try {
      ps.check_peers();
    } catch (const TimeoutError& e) {
      error = e.what();
    }
    const std::optional<PsHeader> h = worker_comm->read_held(Op::kGetState);
    ASSERT_TRUE(h);
    EXPECT_EQ(h->magic, PsHeader::kMagic);
    EXPECT_EQ(h->op, Op::kGetState);
    EXPECT_EQ(h->chunk, 0);
    try {
      ps.shutdown();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "shutdown: " << e.what();
    }
  }
  server.join();
  EXPECT_NE(error.find("waiting for the parameters of chunk 0 from server rank 1"),
            std::string::npos)
      << error;
  EXPECT_EQ(server_error, "");
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

// A worker whose server died with a push in flight: the push, the heartbeats sent while it waited
// for the reply and the abort sent after the timeout stay in flight, and MPI may still read them
// when the worker is gone (a stopped server that goes on, the sender's own progress). Their
// buffers were freed with the worker (in Release glibc's free list wrote over all three headers:
// the push's magic read 1397773138), as the start and state messages were before PendingSends.
TEST(PsWorkerFailure, SendsLeftInFlightWhenTheWorkerFailsKeepTheirBuffers) {
  InProcWorld world(2);
  auto worker_comm = std::make_shared<HoldSendsComm>(
      world.comm(0), std::vector<Op>{Op::kPush, Op::kHeartbeat, Op::kAbort});
  const std::string error = push_to_a_silent_server(world, worker_comm);
  EXPECT_NE(error.find("no reply to the push of chunk 0 (step 1"), std::string::npos) << error;
  for (const Op op : {Op::kPush, Op::kHeartbeat, Op::kAbort}) {
    const std::optional<PsHeader> h = worker_comm->read_held(op);
    ASSERT_TRUE(h) << "no " << op_name(op) << " was sent";
    EXPECT_EQ(h->magic, PsHeader::kMagic) << op_name(op);
    EXPECT_EQ(h->op, op) << op_name(op);
    EXPECT_EQ(h->worker, 0) << op_name(op);
    if (op == Op::kPush) EXPECT_EQ(h->chunk, 0);
    if (op == Op::kPush) EXPECT_EQ(h->step, 1);
  }
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
