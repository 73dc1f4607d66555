// A parameter server's liveness verdict, driven by hand over an InProcWorld (workers 0 and 1 are
// the test thread's messages; server rank 2 runs a ServerLoop on a thread, or on the test's thread
// when everything it gets is queued first):
//  - a server whose loop stood still for longer than the timeout (here: parked inside its Comm,
//    as a descheduled or stopped rank would be) while both workers' pushes arrived does not name
//    a worker as silent: before the fix it named worker 0, whose push was waiting in its receive
//    slots behind worker 1's, in the words of a 20 s bsp failure seen once under TSan at load 18
//    (whether that run's server had stood still is not known);
//  - a worker that really is silent is named, and the message says what the server has from
//    every worker (last message, replies owed, pushes per chunk, the rounds under way); the
//    other worker is told why with the abort's timeout flag set;
//  - a worker owed replies is waiting for the server, not silent, though heard from longest ago;
//    of two workers silent alike, the one heard from longest ago is named;
//  - a worker that said done is never named, however long the others take;
//  - a server kept busy by another worker's messages still names the silent one: only a message
//    from the silent worker itself, waiting in the receive slots, puts the verdict off (97ce62e;
//    before, any waiting message did, and the verdict came only once worker 0's stream ran dry);
//  - a start message that is not a start spec is an error naming the worker.
// What the server sends and records: test_ps_server_sends.cc (helpers: server_harness.h).
// Everything a worker sends is queued before the server may look at it, so no case depends
// on how fast the machine is; the only wait is the stall itself, longer than the timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/inproc_comm.h"
#include "ps/ps_group.h"
#include "ps/server_loop.h"
#include "tests/ps/forwarding_comm.h"
#include "tests/ps/park_gate.h"
#include "tests/ps/server_harness.h"

namespace starring::ps {
namespace {

// Forwards to another Comm; the first time its owner polls a receive after `park_after` receives
// have completed, the poll blocks until release(): the server's loop stands still while the
// workers' messages keep arriving.
class ParkingComm : public ForwardingComm {
 public:
  ParkingComm(std::shared_ptr<Comm> inner, int park_after)
      : ForwardingComm(std::move(inner)), park_after_(park_after) {}
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    return std::make_unique<HookedRecv>(
        inner().irecv(buf, bytes, peer, tag), [this] { maybe_park(); },
        [this] { gate_.set([&] { ++completed_; }); });
  }

  bool wait_parked() { return gate_.wait_parked(); }
  void release() { gate_.release(); }

 private:
  void maybe_park() {
    gate_.park_if([&] { return park_after_ >= 0 && completed_ >= park_after_; });
  }

  const int park_after_;
  ParkGate gate_{kWait};
  int completed_ = 0;  // under gate_'s lock
};

// Forwards to another Comm; each receive, the first time its owner finds it complete, costs the
// owner 2 ms: a server that handles one message per loop is slowed so that a stream of queued
// messages outlasts the timeout. Counts the receives completed.
class SlowComm : public ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    return std::make_unique<HookedRecv>(inner().irecv(buf, bytes, peer, tag), nullptr, [this] {
      ++completed_;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
  }
  int completed() const { return completed_.load(); }

 private:
  std::atomic<int> completed_{0};
};

TEST(PsServerLiveness, AStoppedServerDoesNotNameAWorkerWhosePushIsWaiting) {
  InProcWorld world(3);
  start_workers(world);
  // The server handles the three set-up messages, acknowledges, then stands still at its next
  // poll for three timeouts; meanwhile worker 1, then worker 0 push step 1 and both say done.
  auto comm = std::make_shared<ParkingComm>(world.comm(2), 3);
  const std::string error = serve(comm, [&] {
    const bool parked = comm->wait_parked();
    EXPECT_TRUE(parked);
    if (parked) {
      std::this_thread::sleep_for(options().timeout * 3);
      send_to_server(*world.comm(1), Op::kPush, 1, std::vector<float>(kFloats, 0.25f));
      send_to_server(*world.comm(0), Op::kPush, 1, std::vector<float>(kFloats, 0.75f));
      send_to_server(*world.comm(1), Op::kDone, 0, {});
      send_to_server(*world.comm(0), Op::kDone, 0, {});
    }
    comm->release();
  });
  ASSERT_EQ(error, "");
  for (int w = 0; w < 2; ++w) {  // the round was summed and replied to: 1 - 0.5 x 0.5 each
    auto& c = *world.comm(w);
    EXPECT_EQ(recv_ctl(c), Op::kAck) << "worker " << w;
    std::vector<float> p(kFloats);
    c.recv(p.data(), kFloats * sizeof(float), 2, kReplyTagBase + 0, kWait);
    EXPECT_EQ(p, std::vector<float>(kFloats, 0.75f)) << "worker " << w;
    EXPECT_EQ(recv_ctl(c), Op::kBye) << "worker " << w;
  }
}

TEST(PsServerLiveness, ASilentWorkerIsNamedWithWhatTheServerHasFromEachWorker) {
  InProcWorld world(3);
  start_workers(world);
  send_to_server(*world.comm(0), Op::kPush, 1, std::vector<float>(kFloats, 0.75f));
  // Worker 1 never pushes: once the timeout has passed the server names it.
  const std::string error = serve(world.comm(2));
  std::printf("the server said: %s\n", error.c_str());
  for (const char* part :
       {"server rank 2: timeout after 0.2 s: worker rank 1 (worker 1) sent nothing",
        "worker 0: last message ", ", 1 replies owed; worker 1: last message ",
        "pushes received per chunk: worker 0 1, worker 1 0",
        "1 round(s) under way: chunk 0 step 1 has worker(s) 0"})
    EXPECT_NE(error.find(part), std::string::npos) << part << "\nnot in: " << error;
  // Worker 0 is told why, flagged as a timeout: its PsWorker rethrows the abort as a
  // TimeoutError, as a worker that had timed out itself would (the trainer's messages differ).
  auto& w0 = *world.comm(0);
  EXPECT_EQ(recv_ctl(w0), Op::kAck);
  PsHeader abort = recv_ctl_header(w0);
  // the heartbeats of a held reply come first (worker 0 waited for worker 1 for a timeout/4)
  while (abort.op == Op::kHeartbeat) abort = recv_ctl_header(w0);
  EXPECT_EQ(abort.op, Op::kAbort);
  EXPECT_EQ(abort.step, 1) << "the abort's timeout flag";
}

TEST(PsServerLiveness, AWorkerOwedRepliesIsNotNamedThoughHeardFromLongestAgo) {
  InProcWorld world(3);
  start_workers(world);
  // Worker 0 pushes step 1 and waits for the round's reply; worker 1 is heard from after it (a
  // heartbeat) but never pushes. Worker 0 is the one heard from longest ago, yet it is waiting
  // for the server, not the other way round: worker 1 is the silent one.
  send_to_server(*world.comm(0), Op::kPush, 1, std::vector<float>(kFloats, 0.75f));
  send_to_server(*world.comm(1), Op::kHeartbeat, 0, {});
  const std::string error = serve(world.comm(2));
  EXPECT_EQ(named_worker(error), 1) << error;
}

TEST(PsServerLiveness, OfTwoSilentWorkersTheOneSilentLongestIsNamed) {
  InProcWorld world(3);
  start_workers(world);
  // Nobody pushes: worker 1 was last heard from at its start message, worker 0 after it (its
  // initial parameters, then a heartbeat). The first to fall silent is named.
  send_to_server(*world.comm(0), Op::kHeartbeat, 0, {});
  const std::string error = serve(world.comm(2));
  EXPECT_EQ(named_worker(error), 1) << error;
}

// A worker that has said done is waited for by nobody: the server never names it as silent,
// however long the others still take (asp / ssp: a fast worker ends ahead of a slow one). Here
// worker 0 says done at once; worker 1 (ssp, bound 0) pushes, is owed its reply (worker 0 will
// never catch up), and says done only after three timeouts. A kDone not marked passed every
// other test; the server then named worker 0 after one timeout.
TEST(PsServerLiveness, AWorkerThatSaidDoneIsNeverNamed) {
  InProcWorld world(3);
  start_workers(world, "ssp");
  send_to_server(*world.comm(0), Op::kDone, 0, {});
  send_to_server(*world.comm(1), Op::kPush, 1, std::vector<float>(kFloats, 0.75f));
  const std::string error = serve(world.comm(2), [&] {
    std::this_thread::sleep_for(options().timeout * 3);
    send_to_server(*world.comm(1), Op::kDone, 0, {});
  });
  EXPECT_EQ(error, "");
}

TEST(PsServerLiveness, AServerBusyWithOneWorkersMessagesStillNamesTheSilentOne) {
  InProcWorld world(3);
  start_workers(world);
  // Worker 0 has a stream of heartbeats queued before the server starts; worker 1 never sends
  // again. At 2 ms a message the stream lasts at least 2 s, ten timeouts; in a timeout of the
  // server's watching at most ~130 of them can be handled (at most 6 per 10 ms check, however
  // the machine is loaded), so worker 1 is named with most of them still waiting. Under the old
  // rule (any waiting message puts the verdict off) the stream was drained first.
  constexpr int kHeartbeats = 1000, kSetup = 3;
  for (int i = 0; i < kHeartbeats; ++i) send_to_server(*world.comm(0), Op::kHeartbeat, 0, {});
  auto comm = std::make_shared<SlowComm>(world.comm(2));
  const std::string error = serve(comm);
  std::printf("handled %d of %d messages; the server said: %s\n", comm->completed(),
              kSetup + kHeartbeats, error.c_str());
  EXPECT_NE(error.find("server rank 2: timeout after 0.2 s: worker rank 1 (worker 1) sent nothing"),
            std::string::npos)
      << error;
  EXPECT_LT(comm->completed(), kSetup + kHeartbeats / 2) << "worker 1 named only once worker "
                                                            "0's stream had (nearly) run dry";
}

TEST(PsServerLiveness, AStartMessageThatIsNotAStartSpecIsAnErrorNamingTheWorker) {
  InProcWorld world(3);
  send_to_server(*world.comm(1), Op::kInit, 0, {}, "{\"num_workers\": ");  // cut short
  const std::string error = serve(world.comm(2));
  EXPECT_NE(
      error.find("server rank 2: the start message from worker rank 1 (16 bytes) is not a start "
                 "spec: "),
      std::string::npos)
      << error;
}

}  // namespace
}  // namespace starring::ps
