// What a parameter server sends and records, driven by hand over an InProcWorld
// (tests/ps/server_harness.h; its liveness verdict: test_ps_liveness.cc):
//  - sends read late (PsServerSends): an asp reply holds the parameters of its push, not of a
//    later one; the goodbyes are all sent; a new session's first message, sent at a goodbye,
//    is left for the next server; sends still in flight when the server stops keep their
//    buffers and the parameters they read;
//  - what a server records (PsServerStats): its step bytes are the pushes and replies alone
//    (heartbeats, done, a parameters request and its answer apart), and busy_s adds up every
//    push's time.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
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
#include "tests/ps/hold_sends_comm.h"
#include "tests/ps/server_harness.h"

namespace starring::ps {
namespace {

// Forwards to another Comm; a send's bytes are read (the inner send made) only at its owner's
// next send or its second look at it (test()), as MPI reads a large message only once the
// receiver is ready. `on_send(tag, buf)` runs at each send, before it is forwarded. Used from
// one thread, the test's, which runs the server.
class LateReadComm : public ForwardingComm {
 public:
  using OnSend = std::function<void(int tag, const void* buf)>;
  LateReadComm(std::shared_ptr<Comm> inner, OnSend on_send)
      : ForwardingComm(std::move(inner)), on_send_(std::move(on_send)) {}
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    if (on_send_) on_send_(tag, buf);
    while (!waiting_.empty()) waiting_.front()->start();
    auto r = std::make_unique<LateSend>(*this, buf, bytes, peer, tag);
    waiting_.push_back(r.get());
    return r;
  }

 private:
  class LateSend : public Request {
   public:
    LateSend(LateReadComm& c, const void* buf, std::size_t bytes, int peer, int tag)
        : c_(c), buf_(buf), bytes_(bytes), peer_(peer), tag_(tag) {}
    ~LateSend() override { forget(); }
    void start() {
      forget();
      if (!r_) r_ = c_.inner().isend(buf_, bytes_, peer_, tag_);
    }
    bool test() override {
      if (!r_ && ++looks_ >= 2) start();
      return r_ && r_->test();
    }
    RecvStatus wait(Seconds timeout) override {
      start();
      return r_->wait(timeout);
    }
    RecvStatus status() const override { return r_ ? r_->status() : RecvStatus{}; }

   private:
    void forget() {
      auto& w = c_.waiting_;
      w.erase(std::remove(w.begin(), w.end(), this), w.end());
    }
    LateReadComm& c_;
    const void* buf_;
    std::size_t bytes_;
    int peer_, tag_, looks_ = 0;
    std::unique_ptr<Request> r_;
  };
  OnSend on_send_;
  std::vector<LateSend*> waiting_;  // sends not yet made, oldest first
};

// options() with a timeout nobody reaches: these servers have no silent worker.
ServerOptions patient() {
  ServerOptions o = options();
  o.timeout = Seconds(20.0);
  return o;
}

float recv_reply(Comm& worker) {
  std::vector<float> p(kFloats);
  worker.recv(p.data(), kFloats * sizeof(float), 2, kReplyTagBase + 0, kWait);
  for (float v : p) EXPECT_EQ(v, p[0]);
  return p[0];
}

// A server whose sends are read late (LateReadComm) still sends what it meant to, and all of
// it: under asp, the reply to worker 0's push holds the parameters after that push, not after
// worker 1's, which the server applied before the reply's bytes were read (it sends a copy:
// its parameters change at every push); and it waits for its goodbyes to be taken before it
// returns. A reply sent from the live parameters, or a server that returned with its goodbyes
// unsent, passed every other test: their sends are read at once, in memory or as MPI's eager
// messages (a real chunk, 4 MiB by default, is read late).
TEST(PsServerSends, AspRepliesAndGoodbyesReadLateAreWhatTheServerSent) {
  InProcWorld world(3);
  start_workers(world, "asp");
  send_to_server(*world.comm(0), Op::kPush, 1, std::vector<float>(kFloats, 0.25f));
  send_to_server(*world.comm(1), Op::kPush, 1, std::vector<float>(kFloats, 0.75f));
  send_to_server(*world.comm(0), Op::kDone, 0, {});
  send_to_server(*world.comm(1), Op::kDone, 0, {});
  auto comm = std::make_shared<LateReadComm>(world.comm(2), nullptr);
  ASSERT_NO_THROW(ServerLoop(comm, make_ps_group("1", 3), patient()).run());
  // sgd, momentum 0.9, lr 0.5, each push scaled by 1/2: worker 0's push makes the parameters
  // 1 - 0.5 x 0.125 = 0.9375; worker 1's then 0.9375 - 0.5 x (0.9 x 0.125 + 0.375) = 0.69375.
  const float after[2] = {0.9375f, 0.69375f};
  for (int w = 0; w < 2; ++w) {
    auto& c = *world.comm(w);
    EXPECT_EQ(recv_ctl(c), Op::kAck) << "worker " << w;
    EXPECT_FLOAT_EQ(recv_reply(c), after[w]) << "worker " << w;
    EXPECT_EQ(recv_ctl(c), Op::kBye) << "worker " << w;
  }
}

// Once every worker has said done, a worker that has its goodbye may start a new session on the
// same Comm (bench does, one per size): the server cancels its posted receives before it says
// goodbye, so that session's first message waits for the next server instead of landing in a
// receive of this one, never handled. Here worker 0 sends it as soon as the server sends a kBye.
TEST(PsServerSends, ANewSessionsFirstMessageIsLeftForTheNextServer) {
  InProcWorld world(3);
  start_workers(world);
  send_to_server(*world.comm(0), Op::kDone, 0, {});
  send_to_server(*world.comm(1), Op::kDone, 0, {});
  bool sent = false;
  auto comm = std::make_shared<LateReadComm>(world.comm(2), [&](int tag, const void* buf) {
    if (tag != kCtlTag || sent) return;
    PsHeader h;
    std::memcpy(&h, buf, sizeof h);
    if (h.op != Op::kBye) return;
    sent = true;
    send_to_server(*world.comm(0), Op::kHeartbeat, 7, {});  // the new session's first message
  });
  ASSERT_NO_THROW(ServerLoop(comm, make_ps_group("1", 3), patient()).run());
  ASSERT_TRUE(sent);
  PsHeader h;
  // Already sent: it is there at once unless this server's receives took it.
  ASSERT_NO_THROW(world.comm(2)->recv(&h, sizeof h, kAnySource, kReqTag, Seconds(10.0)));
  EXPECT_EQ(h.op, Op::kHeartbeat);
  EXPECT_EQ(h.step, 7);
}

// Forwards to another Comm; every send of a push's reply costs its owner 5 ms (as a slow copy
// would), and the time it took is added up: a server spends at least that much of its busy_s.
// (Used from one thread, the test's, which runs the server.)
class SlowReplyComm : public ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    if (tag >= kReplyTagBase) {
      const auto t0 = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      slept_s_ += Seconds(std::chrono::steady_clock::now() - t0).count();
      ++replies_;
    }
    return inner().isend(buf, bytes, peer, tag);
  }
  int replies() const { return replies_; }
  double slept_s() const { return slept_s_; }

 private:
  int replies_ = 0;
  double slept_s_ = 0;
};

// What a server records (its goodbye's statistics, which bench's per-server columns and a run's
// summary report): bytes_recv / bytes_sent are the steps' pushes and replies alone - heartbeats,
// done messages and a request for the parameters (kGetState) are set-up bytes in, the answer
// (kState) and the acks control bytes out - and busy_s adds up the time of every push (here
// every reply's 5 ms), not the last push's alone. Heartbeats booked as step bytes, the
// state's answer as a reply, or busy_s overwritten at each push each passed every other test
// (heartbeats come only after timeout/4 of waiting; busy_s was only checked to be in (0, wall]).
TEST(PsServerStats, StepBytesAreThePushesAndRepliesAloneAndBusyCountsEveryPush) {
  InProcWorld world(3);
  start_workers(world);
  constexpr int kSteps = 3;
  const std::size_t push_msg = sizeof(PsHeader) + kFloats * sizeof(float);
  for (int t = 1; t <= kSteps; ++t) {
    send_to_server(*world.comm(1), Op::kHeartbeat, 0, {});
    send_to_server(*world.comm(0), Op::kPush, t, std::vector<float>(kFloats, 0.25f));
    send_to_server(*world.comm(1), Op::kPush, t, std::vector<float>(kFloats, 0.75f));
  }
  send_to_server(*world.comm(1), Op::kGetState, 0, {});  // chunk 0's parameters alone
  send_to_server(*world.comm(0), Op::kDone, 0, {});
  send_to_server(*world.comm(1), Op::kDone, 0, {});
  auto comm = std::make_shared<SlowReplyComm>(world.comm(2));
  nlohmann::json s;
  ASSERT_NO_THROW(s = ServerLoop(comm, make_ps_group("1", 3), patient()).run());
  EXPECT_EQ(comm->replies(), 2 * kSteps);
  EXPECT_EQ(s["pushes"].get<int>(), 2 * kSteps) << s.dump();
  EXPECT_EQ(s["rounds"].get<int>(), kSteps) << s.dump();
  EXPECT_EQ(s["staleness_hist"], nlohmann::json({{"0", 2 * kSteps}})) << s.dump();
  // One chunk, one optimizer update a round; messages in: two inits, the initial parameters, a
  // heartbeat and two pushes a step, kGetState and two kDone; out: the replies, two acks, the
  // state and two goodbyes (updates read as pushes, or replies left out of msgs_out, passed
  // every test: helper-112's mutation test).
  EXPECT_EQ(s["chunks"].get<int>(), 1) << s.dump();
  EXPECT_EQ(s["updates"].get<int>(), kSteps) << s.dump();
  EXPECT_EQ(s["msgs_in"].get<int>(), 3 + 3 * kSteps + 3) << s.dump();
  EXPECT_EQ(s["msgs_out"].get<int>(), 2 * kSteps + 5) << s.dump();
  EXPECT_EQ(s["bytes_recv"].get<std::uint64_t>(), 2 * kSteps * push_msg) << s.dump();
  EXPECT_EQ(s["bytes_sent"].get<std::uint64_t>(), 2 * kSteps * kFloats * sizeof(float)) << s.dump();
  EXPECT_EQ(s["bytes_in"].get<std::uint64_t>(),
            s["bytes_recv"].get<std::uint64_t>() + s["setup_bytes_recv"].get<std::uint64_t>());
  // Out besides the replies: two empty acks, the answer to kGetState (a header and the chunk)
  // and, as these statistics are the ones run() returns, the goodbyes.
  EXPECT_EQ(s["bytes_out"].get<std::uint64_t>(),
            s["bytes_sent"].get<std::uint64_t>() + s["control_bytes_sent"].get<std::uint64_t>());
  EXPECT_GT(s["control_bytes_sent"].get<std::uint64_t>(), 2 * sizeof(PsHeader) + push_msg)
      << s.dump();
  const double busy = s["busy_s"].get<double>();
  EXPECT_GE(busy, comm->slept_s()) << s.dump();
  EXPECT_LE(busy, s["wall_s"].get<double>()) << s.dump();
}

// A server that stops (here: a worker's kAbort) with sends still in flight, because the workers
// they go to are stopped or dead: its start acknowledgements, the round's replies (bsp: sent
// straight from its parameters), the answer to a request for the parameters and the abort it
// sends the other worker. MPI may still read them after the server is gone (a stopped worker
// that goes on, the sender's own progress), so their buffers, and the parameters, must outlive
// it. They were freed with the server (abort_all dropped the sends, the ShardServer took the
// parameters along): read afterwards, the replies were no longer the round's 0.75 and the
// headers lost their magic (glibc's free list writes over a freed block's first 16 bytes).
TEST(PsServerSends, SendsLeftInFlightWhenTheServerStopsKeepTheirBuffers) {
  InProcWorld world(3);
  start_workers(world);
  send_to_server(*world.comm(0), Op::kPush, 1, std::vector<float>(kFloats, 0.25f));
  send_to_server(*world.comm(1), Op::kPush, 1, std::vector<float>(kFloats, 0.75f));
  send_to_server(*world.comm(1), Op::kGetState, 0, {});  // chunk 0's parameters alone
  send_to_server(*world.comm(1), Op::kAbort, 0, {}, "worker 1 failed (test)");
  auto comm =
      std::make_shared<HoldSendsComm>(world.comm(2), [](int, std::optional<Op>) { return true; });
  std::string error;
  try {
    ServerLoop(comm, make_ps_group("1", 3), patient()).run();
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("server rank 2: stopping, worker rank 1 failed: worker 1 failed (test)"),
            std::string::npos)
      << error;
  const auto expect_header = [&](Op op, int worker) {
    const std::optional<PsHeader> h = comm->read_held(op, worker);
    ASSERT_TRUE(h) << "no " << op_name(op) << " was sent to worker " << worker;
    EXPECT_EQ(h->magic, PsHeader::kMagic) << op_name(op) << " to worker " << worker;
    EXPECT_EQ(h->op, op) << op_name(op) << " to worker " << worker;
    EXPECT_EQ(h->worker, 0) << op_name(op) << " to worker " << worker;  // server 0
  };
  for (int w = 0; w < 2; ++w) {
    expect_header(Op::kAck, w);
    EXPECT_EQ(comm->read_floats(kReplyTagBase + 0, w), std::vector<float>(kFloats, 0.75f))
        << "the reply to worker " << w;
  }
  expect_header(Op::kState, 1);
  expect_header(Op::kAbort, 0);
  EXPECT_FALSE(comm->read_held(Op::kAbort, 1)) << "worker 1 said it failed: told nothing more";
}

}  // namespace
}  // namespace starring::ps
