// PeerWatch (trainer/peer_watch.h): a worker waiting at a meeting goes on waiting for a peer that
// begins steps or computes, however long it takes to get there, and names within about the
// timeout a peer that begins none and sleeps (its notes still come) or sends nothing at all. Two
// and three ranks as threads (InProcComm), --timeout 0.4 s.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/inproc_comm.h"
#include "trainer/peer_watch.h"

namespace starring {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Seconds kTimeout{0.4};

double since(Clock::time_point t) { return Seconds(Clock::now() - t).count(); }

// Seconds `w.await(where)` took; its TimeoutError's text goes to `what`.
double timed_await(PeerWatch& w, const char* where, std::string& what) {
  const auto t = Clock::now();
  try {
    w.await(where);
  } catch (const TimeoutError& e) {
    what = e.what();
  }
  return since(t);
}

// Rank 1 begins one step, then runs `rest(w)` (w: its watch) while rank 0 waits for it at the
// evaluation of epoch 1. Returns how long rank 0 waited; its error's text goes to `what`.
template <typename Rest>
double rank0_waits_for_one_step_of_rank1(Rest rest, std::string& what) {
  double took = 0;
  run_ranks(2, [&](Comm& c) {
    c.set_timeout(kTimeout);
    PeerWatch w(c, true);
    if (c.rank() == 1) {
      w.begin_step();
      rest(w);
      return;
    }
    took = timed_await(w, "the evaluation of epoch 1", what);
  });
  return took;
}

// The last rank steps every 0.1 s for 2 s (five timeouts) before the meeting; the others wait
// there for it, twice (two meetings in a row), and leave only once it has arrived.
TEST(PeerWatch, WaitsForASlowPeerThatBeginsSteps) {
  for (int world : {2, 3}) {
    std::vector<double> left(world, 0);
    const auto t0 = Clock::now();
    run_ranks(world, [&](Comm& c) {
      c.set_timeout(kTimeout);
      PeerWatch w(c, true);
      ASSERT_TRUE(w.enabled());
      if (c.rank() == c.size() - 1)
        for (int s = 0; s < 20; ++s) {
          w.begin_step();
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      w.await("meeting 1");
      w.await("meeting 2");
      left[c.rank()] = since(t0);
    });
    for (int r = 0; r < world; ++r) EXPECT_GE(left[r], 1.9) << "world " << world << " rank " << r;
  }
}

// Rank 1 begins one step and then none (as --fault hang: its trainer asleep, its notes going on):
// rank 0 names it after about the timeout, not at once and not never.
TEST(PeerWatch, NamesAPeerThatBeginsNoStep) {
  std::string what;
  const double took = rank0_waits_for_one_step_of_rank1(
      [](PeerWatch&) { std::this_thread::sleep_for(std::chrono::milliseconds(2500)); }, what);
  EXPECT_NE(
      what.find("rank 0: timeout after 0.4 s waiting for rank 1 at the evaluation of epoch 1"),
      std::string::npos)
      << what;
  EXPECT_NE(what.find("began no step"), std::string::npos) << what;
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 1.5);
}

// Rank 1 is alive and computing, in one step that lasts five timeouts (a long step of a wide
// model, or an evaluation between meetings): rank 0 waits for it, since its trainer thread keeps
// using the CPU (common/thread_pulse.h), and names nobody. (Before the trainer's CPU clock was
// read, rank 0 named it after about the timeout: "it began no step for 0.4 s".)
TEST(PeerWatch, WaitsForAPeerInALongStepThatComputes) {
  std::string what;
  const double took = rank0_waits_for_one_step_of_rank1(
      [](PeerWatch& w) {
        const auto t = Clock::now();
        volatile double x = 1;
        while (since(t) < 2.0)
          for (int i = 0; i < 10000; ++i) x = x * 1.0000001 + 1e-9;
        w.await("the evaluation of epoch 1");
      },
      what);
  EXPECT_EQ(what, "");
  EXPECT_GE(took, 1.9);
}

// Rank 1 sleeps 2 s as simulated work (a --straggler's delay, announced with working_until): it is
// waited for too, while a sleep it does not announce is named (NamesAPeerThatBeginsNoStep).
TEST(PeerWatch, WaitsForAPeerWhoseSleepIsSimulatedWork) {
  std::string what;
  const double took = rank0_waits_for_one_step_of_rank1(
      [](PeerWatch& w) {
        const auto until = Clock::now() + std::chrono::milliseconds(2000);
        w.working_until(until);
        std::this_thread::sleep_until(until);
        w.await("the evaluation of epoch 1");
      },
      what);
  EXPECT_EQ(what, "");
  EXPECT_GE(took, 1.9);
}

// Rank 1 has no watch (as a rank stopped by SIGSTOP, or dead): nothing comes from it.
TEST(PeerWatch, NamesAPeerThatSendsNothing) {
  std::string what;
  double took = 0;
  run_ranks(2, [&](Comm& c) {
    c.set_timeout(kTimeout);
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      return;
    }
    PeerWatch w(c, true);
    took = timed_await(w, "the end of the run", what);
  });
  EXPECT_NE(what.find("waiting for rank 1 at the end of the run: nothing came from it"),
            std::string::npos)
      << what;
  EXPECT_LT(took, 1.5);
}

// As a ring rank's wait inside the collective asks it once past its deadline (PeerLiveness):
// rank 1 computes for 1 s (alive), then sleeps 1 s unannounced (`--fault hang`: idle, its notes
// going on: no peer alive, none named, the collective's census names it), then its watch goes (as
// SIGSTOP or death: nothing comes): rank 1 named. Rank 0 asks at 0.8 s, then from 1.0 s and
// from 2.5 s until the answer is "no" (a silent peer is named after one more round of notes).
TEST(PeerWatch, TellsAWaitInACollectiveWhetherAPeerIsAlive) {
  bool computing = false;
  std::string idle_why = "-", gone_why;
  double idle_at = 0, gone_at = 0;
  run_ranks(2, [&](Comm& c) {
    c.set_timeout(kTimeout);
    auto w = std::make_unique<PeerWatch>(c, true);
    const auto t0 = Clock::now();
    if (c.rank() == 1) {
      w->begin_step();
      volatile double x = 1;
      while (since(t0) < 1.0)
        for (int i = 0; i < 10000; ++i) x = x * 1.0000001 + 1e-9;
      std::this_thread::sleep_until(t0 + std::chrono::milliseconds(2000));
      w.reset();
      std::this_thread::sleep_until(t0 + std::chrono::milliseconds(3000));
      return;
    }
    const auto ask_until_no = [&](double from, double to, std::string& why) {
      std::this_thread::sleep_until(t0 + std::chrono::milliseconds(int(from * 1000)));
      while (w->peers_alive(&why) && since(t0) < to)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return since(t0);
    };
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(800));
    std::string why;
    computing = w->peers_alive(&why) && why.empty();
    idle_at = ask_until_no(1.0, 1.95, idle_why);
    gone_at = ask_until_no(2.5, 2.95, gone_why);
  });
  EXPECT_TRUE(computing);
  EXPECT_LT(idle_at, 1.95);  // 0.4 s after its last sign of life, plus a note's period
  EXPECT_EQ(idle_why, "");
  EXPECT_LT(gone_at, 2.95);
  EXPECT_NE(gone_why.find("rank 1 sent nothing for"), std::string::npos) << gone_why;
}

// A silent peer is named only after one more round of notes, in every wait: rank 1 looks silent
// at rank 0's first ask (it has no watch yet), then sends notes for 0.5 s, then goes silent. The
// first ask of that second silence waits on too (its note may be waiting for the next drain); the
// grace of the first silence, left set because no ask followed it, named it at once.
TEST(PeerWatch, EachSilenceGetsOneMoreRoundOfNotes) {
  bool first = false, second = false;
  std::string first_why = "-", second_why = "-", gone_why;
  run_ranks(2, [&](Comm& c) {
    c.set_timeout(kTimeout);
    const auto t0 = Clock::now();
    const auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
    if (c.rank() == 1) {
      std::this_thread::sleep_until(at(500));
      {
        PeerWatch w(c, true);
        w.begin_step();
        std::this_thread::sleep_until(at(1000));
      }
      std::this_thread::sleep_until(at(2200));
      return;
    }
    PeerWatch w(c, true);
    std::this_thread::sleep_until(at(450));
    first = w.peers_alive(&first_why);
    std::this_thread::sleep_until(at(1600));
    second = w.peers_alive(&second_why);
    while (w.peers_alive(&gone_why) && Clock::now() < at(2100))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  EXPECT_TRUE(first) << first_why;
  EXPECT_TRUE(second) << second_why;
  EXPECT_NE(gone_why.find("rank 1 sent nothing for"), std::string::npos) << gone_why;
}

// Off (bsp, the ring; one worker): no thread, await() returns at once.
TEST(PeerWatch, OffWaitsForNobody) {
  run_ranks(2, [&](Comm& c) {
    c.set_timeout(kTimeout);
    PeerWatch w(c, false);
    EXPECT_FALSE(w.enabled());
    if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
    const auto t = Clock::now();
    w.await("x");
    EXPECT_LT(since(t), 0.1);
  });
  run_ranks(1, [&](Comm& c) { EXPECT_FALSE(PeerWatch(c, true).enabled()); });
}

}  // namespace
}  // namespace starring
