// A worker alive in one step longer than the servers' --timeout, under bsp, asp and ssp, with
// ranks as threads (InProcWorld: 2 workers + 1 server, or 2 co-located), --timeout 0.4 s (0.8 s
// where the run must finish):
//  - its trainer computes for 2 s (2.5 to 5 timeouts: a wide model's step, an evaluation) or sleeps
//    that long as announced simulated work (a --straggler's delay, working_until): the run ends
//    without an error (its comm thread heartbeats the servers while its trainer shows signs of
//    life, common/thread_pulse.h; under bsp and ssp the server heartbeats worker 0, whose replies
//    it holds back meanwhile, so that its reply deadlines wait too), and, with a dedicated server,
//    both workers' step bytes are those of a run without the long step (heartbeats are control);
//  - its trainer sleeps without announcing it (as `--fault hang`: alive, no progress): the server
//    still names it, within about the timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "ps_test_util.h"
#include "tests/ps/forwarding_comm.h"

namespace starring::ps {
namespace {

using namespace starring::ps::testing;
using Clock = std::chrono::steady_clock;
constexpr int kSteps = 5;
constexpr int kLongStep = 3;
constexpr auto kLong = std::chrono::milliseconds(2000);

// kShortSteps: worker 1 sleeps 10 ms in every step (well under --timeout/4), worker 0 waits for
// it in each (bsp: the server holds its reply for worker 1's push).
enum class Stall { kNone, kCompute, kAnnouncedSleep, kSilentSleep, kShortSteps };

struct Outcome {
  std::vector<std::string> errors;        // by rank
  std::vector<std::uint64_t> sent, recv;  // by worker: the bytes its steps reported
  double took = 0;
  nlohmann::json server;  // the dedicated server's stats
};

Outcome run(const std::string& consistency, const std::string& servers, Stall stall,
            double timeout = 0.4, int steps = kSteps) {
  const int n = servers == "colocated" ? 2 : 3;
  const PsGroup group = make_ps_group(servers, n);
  PsWorkerOptions opt = test_options(consistency);
  opt.timeout = Seconds(timeout);
  opt.shared_memory = false;
  Outcome out;
  out.sent.assign(2, 0);
  out.recv.assign(2, 0);
  const auto t0 = Clock::now();
  std::atomic<bool> there[2] = {false, false};  // by worker: at the last meeting, or gone
  std::atomic<bool> server_ended{false};        // a dedicated server: before the workers, it failed
  const auto worker_or_server = [&](std::shared_ptr<Comm> comm) {
    if (group.is_dedicated_server(comm->rank())) {
      out.server = ServerLoop(comm, group, server_options(opt)).run();
      return;
    }
    const int w = group.worker_index(comm->rank());
    PsWorker ps(comm, group, opt);
    const auto slow = [&](int t) {
      if (w == 1 && stall == Stall::kShortSteps)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (w != 1 || t != kLongStep || stall == Stall::kShortSteps) return;
      const auto until = Clock::now() + kLong;
      if (stall == Stall::kCompute) {
        volatile double x = 1;
        while (Clock::now() < until)
          for (int i = 0; i < 10000; ++i) x = x * 1.0000001 + 1e-9;
      } else if (stall == Stall::kAnnouncedSleep) {
        ps.working_until(until);
        std::this_thread::sleep_until(until);
      } else if (stall == Stall::kSilentSleep) {  // until then, or until the server named it
        while (Clock::now() < until && !server_ended)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    };
    const auto count = [&](const SyncStepStats& st) {
      out.sent[static_cast<std::size_t>(w)] += st.bytes_sent;
      out.recv[static_cast<std::size_t>(w)] += st.bytes_recv;
    };
    // The end of the run's meeting (trainer/peer_watch.h): worker 0, long done, waits there
    // for worker 1 (or its end), heartbeating the servers as a trainer's meeting does.
    const auto meet = [&] {
      ps.waiting_for_workers(true);
      there[static_cast<std::size_t>(w)] = true;
      while (!(there[0] && there[1]) && Clock::now() - t0 < std::chrono::seconds(30))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ps.waiting_for_workers(false);
    };
    train_worker(ps, w, steps, test_opt("sgd"), slow, count, meet);
  };
  const auto gone = [&](int rank) {  // a worker that failed meets nobody
    if (group.is_dedicated_server(rank))
      server_ended = true;
    else
      there[static_cast<std::size_t>(group.worker_index(rank))] = true;
  };
  out.errors = run_world(n, worker_or_server, nullptr, gone);
  out.took = Seconds(Clock::now() - t0).count();
  return out;
}

// The computing and the sleeping worker's runs go at once (worlds of their own; one core
// computes). Under bsp with a dedicated server, the server's heartbeats went to worker 0, which
// waited for worker 1's long step (it holds back worker 0's reply meanwhile).
TEST(PsLongStep, ALiveWorkerInAStepLongerThanTheTimeoutIsWaitedFor) {
  for (const std::string consistency : {"bsp", "asp", "ssp"})
    for (const std::string servers : {"1", "colocated"}) {
      // --timeout 0.8 s here (2.5 of them in the long step): at 0.4 s the run failed 3 of ~12
      // times at load 5-8 on 2 cores, a server's loop paused up to 0.35 s.
      const Outcome plain = run(consistency, servers, Stall::kNone, 0.8);
      auto computing = std::async(std::launch::async,
                                  [&] { return run(consistency, servers, Stall::kCompute, 0.8); });
      const Outcome asleep = run(consistency, servers, Stall::kAnnouncedSleep, 0.8);
      const Outcome busy = computing.get();
      if (consistency == "bsp" && servers == "1") {
        EXPECT_GT(asleep.server.value("heartbeats_out", 0), 0) << asleep.server.dump();
        EXPECT_GT(asleep.server.value("heartbeats_in", 0), 0) << asleep.server.dump();
      }
      for (const Stall stall : {Stall::kCompute, Stall::kAnnouncedSleep}) {
        const std::string what = consistency + ", servers " + servers +
                                 (stall == Stall::kCompute ? ", computing" : ", announced sleep");
        const Outcome& o = stall == Stall::kCompute ? busy : asleep;
        for (std::size_t r = 0; r < o.errors.size(); ++r)
          EXPECT_EQ(o.errors[r], "") << what << ", rank " << r;
        EXPECT_GE(o.took, 2.0) << what;
        // Co-located, a worker's steps also count its shard's replies to the other worker, which
        // fall in its steps or after them as the timing goes: compared with a dedicated server.
        if (servers == "colocated") continue;
        EXPECT_EQ(o.sent, plain.sent) << what;
        EXPECT_EQ(o.recv, plain.recv) << what;
      }
    }
}

// `--fault hang` as the servers see it: worker 1's trainer sleeps, unannounced; its comm thread
// runs on but vouches for nothing, so the server names it after about the timeout.
TEST(PsLongStep, AWorkerAsleepWithoutAnnouncingItIsStillNamed) {
  for (const std::string consistency : {"bsp", "asp", "ssp"}) {
    const Outcome o = run(consistency, "1", Stall::kSilentSleep);
    const std::string& server = o.errors.at(2);
    EXPECT_NE(server.find("timeout after 0.4 s: worker rank 1 (worker 1) sent nothing"),
              std::string::npos)
        << consistency << ": " << server;
    EXPECT_NE(o.errors.at(0).find("stopped by parameter server 0"), std::string::npos)
        << consistency << ": " << o.errors.at(0);
  }
}

// bsp with steps well under the timeout sends what it sent before these heartbeats: no heartbeat
// either way. A worker's liveness heartbeats go only to a server it sent nothing for timeout/4
// (waiting for a reply, at a meeting, or its trainer alive in a long step); the server's only to a
// worker owed a reply for timeout/4 since its push. The run lasts several timeout/4 (250 steps of
// 10 ms or more, --timeout 4 s): worker 1's trainer shows signs of life throughout, and worker 0's
// comm thread waits for a reply most of the time. (At --timeout 30 s and 5 steps, as before, the
// run ended before any timeout/4 had passed and no heartbeat could be sent either way; worker 0,
// waiting, heartbeated every server every timeout/4 although it pushed to each in every step.)
TEST(PsLongStep, ABspRunWithShortStepsSendsNoHeartbeat) {
  const Outcome o = run("bsp", "1", Stall::kShortSteps, 4.0, 250);
  for (std::size_t r = 0; r < o.errors.size(); ++r) EXPECT_EQ(o.errors[r], "") << r;
  EXPECT_GE(o.took, 2.5);  // 2.5 timeout/4s at least: a heartbeat could have gone
  EXPECT_EQ(o.server.value("heartbeats_in", -1), 0) << o.server.dump();
  EXPECT_EQ(o.server.value("heartbeats_out", -1), 0) << o.server.dump();
}

// What a worker sends the servers (kReqTag), in order: the ops of its messages.
class ReqLog : public ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    if (tag == kReqTag && bytes >= sizeof(PsHeader)) {
      PsHeader h;
      std::memcpy(&h, buf, sizeof h);
      std::lock_guard<std::mutex> lk(mu);
      ops.push_back(h.op);
    }
    return inner().isend(buf, bytes, peer, tag);
  }
  std::mutex mu;
  std::vector<Op> ops;
};

// kDone is a worker's last message to a server (ServerLoop::finish cancels its receives then, and
// a next session on the Comm would take a later one). Worker 0 says goodbye while worker 1 still
// trains (an announced 0.3 s sleep, 3 x timeout/4): its trainer, just active, showed signs of
// life since its comm thread's previous check, so that thread's liveness heartbeats
// (common/thread_pulse.h) went to the server quiet for timeout/4 after the kDone.
TEST(PsLongStep, NoHeartbeatFollowsAWorkersGoodbye) {
  const PsGroup group = make_ps_group("1", 3);
  PsWorkerOptions opt = test_options("asp");
  opt.timeout = Seconds(0.4);
  opt.shared_memory = false;
  std::shared_ptr<ReqLog> log;
  const auto errors = run_world(3, [&](std::shared_ptr<Comm> comm) {
    if (group.is_dedicated_server(comm->rank())) {
      ServerLoop(comm, group, server_options(opt)).run();
      return;
    }
    const int w = group.worker_index(comm->rank());
    std::shared_ptr<Comm> mine = comm;
    if (w == 0) mine = log = std::make_shared<ReqLog>(comm);
    PsWorker ps(mine, group, opt);
    const auto slow = [&](int t) {
      if (w != 1 || t != 2) return;
      const auto until = Clock::now() + std::chrono::milliseconds(300);
      ps.working_until(until);
      std::this_thread::sleep_until(until);
    };
    train_worker(ps, w, 2, test_opt("sgd"), slow);
  });
  for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << r;
  ASSERT_TRUE(log);
  const auto done = std::find(log->ops.begin(), log->ops.end(), Op::kDone);
  ASSERT_NE(done, log->ops.end());
  const auto after = log->ops.end() - done - 1;
  EXPECT_EQ(after, 0) << "the first: " << (after ? op_name(*(done + 1)) : "");
}

// A server that sends its goodbye (kBye) `delay` late.
class LateBye : public ForwardingComm {
 public:
  LateBye(std::shared_ptr<Comm> inner, std::chrono::milliseconds delay)
      : ForwardingComm(std::move(inner)), delay_(delay) {}
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    PsHeader h;
    if (tag == kCtlTag && bytes >= sizeof h) std::memcpy(&h, buf, sizeof h);
    if (tag == kCtlTag && bytes >= sizeof h && h.op == Op::kBye)
      std::this_thread::sleep_for(delay_);
    return inner().isend(buf, bytes, peer, tag);
  }

 private:
  std::chrono::milliseconds delay_;
};

// Two sessions on one Comm (as bench runs one per size), 2 workers and 2 servers. In the first,
// server rank 3 says goodbye 0.3 s late: the workers wait for it, past timeout/4 after their
// last push, while server rank 2 has finished (its receives cancelled). A heartbeat sent then
// reached the second session's server rank 2 as a message of its own.
TEST(PsLongStep, AGoodbyeWaitSendsNothingIntoTheNextSession) {
  InProcWorld world(4);
  const PsGroup group = make_ps_group("2", 4);
  const auto session = [&](Seconds timeout, bool late_bye) {
    PsWorkerOptions opt = test_options("asp");
    opt.timeout = timeout;
    opt.shared_memory = false;
    std::vector<nlohmann::json> stats(4);
    std::vector<std::string> errors(4);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 4; ++r)
      ranks.emplace_back([&, r] {
        try {
          std::shared_ptr<Comm> comm = world.comm(r);
          if (group.is_dedicated_server(r)) {
            if (late_bye && r == 3)
              comm = std::make_shared<LateBye>(comm, std::chrono::milliseconds(300));
            stats[static_cast<std::size_t>(r)] = ServerLoop(comm, group, server_options(opt)).run();
            return;
          }
          PsWorker ps(comm, group, opt);
          train_worker(ps, group.worker_index(r), 2, test_opt("sgd"));
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    for (auto& t : ranks) t.join();
    for (int r = 0; r < 4; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    return stats;
  };
  session(Seconds(0.4), true);
  const auto next = session(Seconds(20.0), false);  // no heartbeat of its own
  for (int r : {2, 3})
    EXPECT_EQ(next[static_cast<std::size_t>(r)].value("heartbeats_in", -1), 0)
        << "server rank " << r << ": " << next[static_cast<std::size_t>(r)].dump();
}

}  // namespace
}  // namespace starring::ps
