// What a PS worker's buffers do once it gave up waiting, driven over an InProcWorld
// (tests/ps/ps_worker_harness.h; the reply deadlines themselves: test_ps_worker_liveness.cc):
//  - co-located, an own shard that answers check_peers only after the grace (it stood still, then
//    went on) writes nothing: it wrote into check_peers' freed scratch buffer (glibc: "malloc():
//    unaligned tcache chunk detected", abort);
//  - check_peers' requests whose sends did not complete before it gave up keep their buffers (MPI
//    may read them later), and so do a failed worker's push, heartbeats and abort;
//  - a server that does not take worker 0's initial parameters (stopped before it took them) is
//    named by the wait for the start acknowledgements, and the send keeps its buffer; the worker
//    waited on the send alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/inproc_comm.h"
#include "ps/ps_worker.h"
#include "ps/server_loop.h"
#include "tests/ps/forwarding_comm.h"
#include "tests/ps/hold_sends_comm.h"
#include "tests/ps/park_gate.h"
#include "tests/ps/ps_worker_harness.h"

namespace starring::ps {
namespace {

using namespace worker_harness;

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

// A server stopped (or stuck) before it took worker 0's initial parameters: a send that large is
// rendezvous under MPI and never completes. The worker waited for it first, on the send alone
// ("rank 0: timeout after 0.2 s in send to rank 1 (tag 1048576)": no server, no start, and no
// ear for another server's kAbort meanwhile); now its sends are waited for after the servers'
// acknowledgements (a server acknowledges once it has every message), which name the server.
TEST(PsWorkerStart, AServerThatDoesNotTakeTheInitialParametersIsNamed) {
  InProcWorld world(2);  // rank 1, the server, is stopped: it takes nothing, acknowledges nothing
  auto comm = std::make_shared<HoldSendsComm>(world.comm(0), std::vector<Op>{Op::kInitParams});
  std::vector<float> p(kFloats, 1.0f), g(kFloats, 0.0f);
  std::string error;
  {
    PsWorker ps(comm, make_ps_group("1", 2), worker_options());
    try {
      ps.start(layout(), {p.data(), g.data(), false, nullptr}, sgd());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  std::printf("the worker said: %s\n", error.c_str());
  for (const char* part :
       {"rank 0 (worker 0): timeout after 0.7 s waiting for the servers' start "
        "acknowledgements",
        "; no start acknowledgement from server rank 1 (stopped, stuck or slow)"})
    EXPECT_NE(error.find(part), std::string::npos) << part << "\nnot in: " << error;
  const std::optional<PsHeader> h = comm->read_held(Op::kInitParams);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->magic, PsHeader::kMagic);  // kept: MPI may still read it
}

}  // namespace
}  // namespace starring::ps
