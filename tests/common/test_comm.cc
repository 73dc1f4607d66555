// Comm implementations: in-process (threads) and MPI (run under mpirun -np 2/4; the MPI cases
// skip when the job has one rank). Each scenario is one function of a Comm, run on both.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <set>
#include <thread>

#include "common/comm_util.h"
#include "common/error.h"
#include "common/inproc_comm.h"
#include "common/mpi_comm.h"
#include "common/sub_comm.h"
#include "tests/scheduling_lag.h"

namespace starring {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Seconds kLong{20.0};

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Runs `body` on an MPI world Comm when the job has >= 2 ranks, else skips.
#define MPI_ONLY()                                               \
  if (world_size() < 2) GTEST_SKIP() << "needs mpirun -np >= 2"; \
  auto mpi_world = std::make_shared<MpiComm>(MPI_COMM_WORLD);    \
  mpi_world->set_timeout(kLong)

// In-process cases run once (in the plain test), not on every rank of an mpirun job.
#define INPROC_ONLY() \
  if (world_size() > 1) GTEST_SKIP() << "in-process cases run in the plain test"

float value(int rank, int i) { return static_cast<float>(rank * 1000 + i % 997); }

void ping_pong(Comm& c) {
  const int n = 1000;
  std::vector<float> buf(n);
  if (c.rank() == 0) {
    for (int peer = 1; peer < c.size(); ++peer) {
      for (int i = 0; i < n; ++i) buf[i] = value(peer, i);
      c.send(buf.data(), n * 4, peer, 5, kLong);
      std::vector<float> back(n, -1);
      auto st = c.recv(back.data(), n * 4, peer, 6, kLong);
      EXPECT_EQ(st.source, peer);
      EXPECT_EQ(st.bytes, n * 4u);
      for (int i = 0; i < n; ++i) ASSERT_EQ(back[i], 2 * value(peer, i) + 1);
    }
  } else {
    c.recv(buf.data(), n * 4, 0, 5, kLong);
    for (int i = 0; i < n; ++i) buf[i] = 2 * buf[i] + 1;
    c.send(buf.data(), n * 4, 0, 6, kLong);
  }
}

void ring_sendrecv(Comm& c) {
  const int n = c.size(), r = c.rank();
  std::vector<float> out(64), in(64, -1);
  for (int i = 0; i < 64; ++i) out[i] = value(r, i);
  c.sendrecv(out.data(), 256, (r + 1) % n, in.data(), 256, (r - 1 + n) % n, 9, kLong);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(in[i], value((r - 1 + n) % n, i));
}

void any_source(Comm& c) {
  if (c.rank() == 0) {
    std::set<int> seen;
    for (int k = 1; k < c.size(); ++k) {
      int payload = -1;
      auto st = c.recv(&payload, sizeof payload, kAnySource, 11, kLong);
      EXPECT_EQ(st.source, payload);
      EXPECT_EQ(st.bytes, sizeof payload);
      seen.insert(payload);
    }
    EXPECT_EQ(static_cast<int>(seen.size()), c.size() - 1);
  } else {
    int payload = c.rank();
    c.send(&payload, sizeof payload, 0, 11, kLong);
  }
}

// Many messages on one (source, tag) arrive in send order, whether the receives are posted
// before or after the sends, and for specific and any-source receives.
void non_overtaking(Comm& c) {
  const int m = 200;
  if (c.rank() == 1) {
    std::vector<int> seq(m);
    std::iota(seq.begin(), seq.end(), 0);
    std::vector<std::unique_ptr<Request>> reqs;
    for (int k = 0; k < m; ++k) reqs.push_back(c.isend(&seq[k], sizeof(int), 0, 13));
    for (auto& r : reqs) r->wait(kLong);
    c.send(seq.data(), m * sizeof(int), 0, 14, kLong);
  } else if (c.rank() == 0) {
    std::vector<int> got(m, -1);
    std::vector<std::unique_ptr<Request>> reqs;
    for (int k = 0; k < m; ++k) {
      reqs.push_back(c.irecv(&got[k], sizeof(int), k % 2 ? kAnySource : 1, 13));
    }
    for (auto& r : reqs) r->wait(kLong);
    for (int k = 0; k < m; ++k) ASSERT_EQ(got[k], k);
    c.recv(got.data(), m * sizeof(int), 1, 14, kLong);
    for (int k = 0; k < m; ++k) ASSERT_EQ(got[k], k);
  }
}

void byte_counters(Comm& c) {
  c.barrier(kLong);
  CommCounters before = c.counters();
  const int n = c.size(), r = c.rank();
  std::vector<char> out(1000 + r), in(1000 + n);
  c.sendrecv(out.data(), out.size(), (r + 1) % n, in.data(), in.size(), (r - 1 + n) % n, 17, kLong);
  CommCounters after = c.counters();
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, 1000u + r);
  EXPECT_EQ(after.bytes_recv - before.bytes_recv, 1000u + (r - 1 + n) % n);
  EXPECT_EQ(after.msgs_sent - before.msgs_sent, 1u);
  EXPECT_EQ(after.msgs_recv - before.msgs_recv, 1u);
}

// Rank 0 waits for a message rank 1 never sends: TimeoutError naming both, within the timeout:
// not before it, and not far beyond it plus how late this process ran meanwhile (a control
// measured in the same run, tests/scheduling_lag.h).
void silent_peer(Comm& c) {
  const Seconds timeout{0.3};
  if (c.rank() == 0) {
    int x = 0;
    starring::testing::SchedulingLag lag;  // the control for the upper bound
    auto t0 = Clock::now();
    try {
      c.recv(&x, sizeof x, 1, 21, timeout);
      ADD_FAILURE() << "recv from a silent peer returned";
    } catch (const TimeoutError& e) {
      double waited = std::chrono::duration<double>(Clock::now() - t0).count();
      const double late = lag.stop();
      std::string msg = e.what();
      EXPECT_NE(msg.find("rank 0: timeout after 0.3 s in recv from rank 1 (tag 21)"),
                std::string::npos)
          << msg;
      EXPECT_GE(waited, 0.3);
      EXPECT_LT(waited, 0.3 + 5.0 + late)
          << "timeout fired far too late; this process ran " << late << " s late meanwhile";
    }
  }
  c.barrier(kLong);
}

TEST(InProcComm, PingPong) {
  INPROC_ONLY();
  for (int n : {1, 2, 3, 4, 8}) run_ranks(n, ping_pong);
}
TEST(InProcComm, RingSendRecv) {
  INPROC_ONLY();
  for (int n : {1, 2, 3, 4, 8}) run_ranks(n, ring_sendrecv);
}
TEST(InProcComm, AnySource) {
  INPROC_ONLY();
  for (int n : {2, 4, 8}) run_ranks(n, any_source);
}
TEST(InProcComm, NonOvertaking) {
  INPROC_ONLY();
  run_ranks(2, non_overtaking);
  run_ranks(3, non_overtaking);
}
TEST(InProcComm, ByteCounters) {
  INPROC_ONLY();
  for (int n : {1, 2, 3, 4}) run_ranks(n, byte_counters);
}
TEST(InProcComm, SilentPeerTimesOut) {
  INPROC_ONLY();
  run_ranks(2, silent_peer);
  run_ranks(3, silent_peer);
}
TEST(InProcComm, BarrierWithAbsentRankTimesOut) {
  INPROC_ONLY();
  try {
    run_ranks(3, [](Comm& c) {
      if (c.rank() != 2) c.barrier(Seconds(0.3));
    });
    FAIL() << "barrier without rank 2 returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("timeout"), std::string::npos);
  }
}
TEST(InProcComm, TruncationIsAnError) {
  INPROC_ONLY();
  EXPECT_THROW(run_ranks(2,
                         [](Comm& c) {
                           char big[16] = {}, small[4];
                           if (c.rank() == 0) c.send(big, 16, 1, 3, kLong);
                           if (c.rank() == 1) c.recv(small, 4, 0, 3, kLong);
                         }),
               Error);
}
TEST(InProcComm, FailingRankAbortsTheOthers) {
  INPROC_ONLY();
  auto t0 = Clock::now();
  try {
    run_ranks(4, [](Comm& c) {
      if (c.rank() == 3) throw Error("rank 3: injected failure");
      int x;
      c.recv(&x, sizeof x, 3, 1, Seconds(60));
    });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 3: injected failure");
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 30.0);
}
TEST(InProcComm, AbandonedReceiveIsNeverWritten) {
  INPROC_ONLY();
  run_ranks(2, [](Comm& c) {
    if (c.rank() == 1) {
      {
        int dead = -1;
        auto r = c.irecv(&dead, sizeof dead, 0, 4);
      }  // destroyed unfinished
      c.barrier(kLong);
      int x = -1;
      c.recv(&x, sizeof x, 0, 4, kLong);
      EXPECT_EQ(x, 42);
    } else {
      c.barrier(kLong);
      int v = 42;
      c.send(&v, sizeof v, 1, 4, kLong);
    }
  });
}

// The words of every timeout error: "send to" / "recv from", a rank or "any rank", the tag.
TEST(CommUtil, DescribesTheOperationAndTheTimeout) {
  INPROC_ONLY();
  EXPECT_EQ(describe_op(true, 2, 7), "send to rank 2 (tag 7)");
  EXPECT_EQ(describe_op(false, 3, 65536), "recv from rank 3 (tag 65536)");
  EXPECT_EQ(describe_op(false, kAnySource, 11), "recv from any rank (tag 11)");
  InProcWorld world(2);
  EXPECT_EQ(timeout_message(*world.comm(1), Seconds(1.5), "barrier"),
            "rank 1: timeout after 1.5 s in barrier");
}
// An any-source receive that nobody answers names "any rank" in its TimeoutError.
TEST(InProcComm, AnySourceTimeoutSaysAnyRank) {
  INPROC_ONLY();
  run_ranks(2, [](Comm& c) {
    if (c.rank() != 1) return;
    int x = 0;
    try {
      c.recv(&x, sizeof x, kAnySource, 12, Seconds(0.2));
      ADD_FAILURE() << "any-source recv with no sender returned";
    } catch (const TimeoutError& e) {
      EXPECT_NE(
          std::string(e.what()).find("rank 1: timeout after 0.2 s in recv from any rank (tag 12)"),
          std::string::npos)
          << e.what();
    }
  });
}
// A barrier that one rank never reaches lets no other rank through: each times out (a
// dissemination barrier that skipped a round would let some pass).
TEST(InProcComm, NoRankPassesABarrierThatOneRankMisses) {
  INPROC_ONLY();
  for (int n : {3, 4, 5, 8}) {
    std::atomic<int> passed{0}, timed_out{0};
    run_ranks(n, [&](Comm& c) {
      if (c.rank() == n - 1) return;  // absent
      try {
        c.barrier(Seconds(0.3));
        ++passed;
      } catch (const TimeoutError&) {
        ++timed_out;
      }
    });
    EXPECT_EQ(passed.load(), 0) << n << " ranks";
    EXPECT_EQ(timed_out.load(), n - 1) << n << " ranks";
  }
}
// Messages on different tags between the same pair never match each other's receives, whether
// the receives are posted before the sends (barrier between) or after them.
TEST(InProcComm, TagsKeepMessagesApart) {
  INPROC_ONLY();
  for (bool post_first : {true, false}) {
    run_ranks(2, [&](Comm& c) {
      if (c.rank() == 0) {
        if (post_first) c.barrier(kLong);
        int a = 20, b = 10;
        c.send(&a, sizeof a, 1, 32, kLong);
        c.send(&b, sizeof b, 1, 31, kLong);
        if (!post_first) c.barrier(kLong);
      } else {
        int on31 = -1, on32 = -1;
        if (!post_first) c.barrier(kLong);  // both messages wait, unexpected
        auto r31 = c.irecv(&on31, sizeof on31, 0, 31);
        auto r32 = c.irecv(&on32, sizeof on32, kAnySource, 32);
        if (post_first) c.barrier(kLong);
        r31->wait(kLong);
        r32->wait(kLong);
        EXPECT_EQ(on31, 10) << "post_first " << post_first;
        EXPECT_EQ(on32, 20) << "post_first " << post_first;
      }
    });
  }
}
// Non-overtaking with a fixed order of events: all receives posted before the first send, and
// all sends queued before the first receive.
TEST(InProcComm, NonOvertakingInBothOrders) {
  INPROC_ONLY();
  for (bool post_first : {true, false}) {
    run_ranks(2, [&](Comm& c) {
      const int m = 16;
      if (c.rank() == 0) {
        if (post_first) c.barrier(kLong);
        for (int k = 0; k < m; ++k) c.send(&k, sizeof k, 1, 33, kLong);
        if (!post_first) c.barrier(kLong);
      } else {
        std::vector<int> got(m, -1);
        std::vector<std::unique_ptr<Request>> reqs;
        if (!post_first) c.barrier(kLong);
        for (int k = 0; k < m; ++k)
          reqs.push_back(c.irecv(&got[k], sizeof(int), k % 2 ? kAnySource : 0, 33));
        if (post_first) c.barrier(kLong);
        for (auto& r : reqs) r->wait(kLong);
        for (int k = 0; k < m; ++k) EXPECT_EQ(got[k], k) << "post_first " << post_first;
      }
    });
  }
}
// A message too big for its receive buffer (by one byte or many): the error names the receiving
// rank, the sender, the tag and both sizes, whether the receive was posted first or the message
// came first.
TEST(InProcComm, TruncationErrorNamesBothRanks) {
  INPROC_ONLY();
  for (std::size_t size : {16, 5}) {
    for (bool post_first : {true, false}) {
      try {
        run_ranks(2, [&](Comm& c) {
          char big[16] = {}, small[4];
          if (c.rank() == 0) {
            if (post_first) c.barrier(kLong);
            c.send(big, size, 1, 3, kLong);
            if (!post_first) c.barrier(kLong);
          } else {
            if (!post_first) c.barrier(kLong);
            auto r = c.irecv(small, 4, 0, 3);
            if (post_first) c.barrier(kLong);
            r->wait(kLong);
          }
        });
        ADD_FAILURE() << "truncated receive of " << size << " bytes returned";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1: message of " + std::to_string(size) +
                                             " bytes from rank 0 (tag 3) truncated: receive "
                                             "buffer holds 4"),
                  std::string::npos)
            << "post_first " << post_first << ": " << e.what();
      }
    }
  }
}
// A receive completed by test() and then waited on counts its bytes once.
void test_then_wait_counts_once(Comm& c) {
  c.barrier(kLong);
  CommCounters before = c.counters();
  if (c.rank() == 0) {
    int v = 77;
    c.send(&v, sizeof v, 1, 34, kLong);
  } else if (c.rank() == 1) {
    int x = -1;
    auto r = c.irecv(&x, sizeof x, kAnySource, 34);
    while (!r->test()) std::this_thread::yield();
    EXPECT_EQ(r->status().source, 0);
    EXPECT_EQ(r->status().bytes, sizeof x);
    EXPECT_TRUE(r->test());
    RecvStatus st = r->wait(kLong);
    EXPECT_EQ(st.source, 0);
    EXPECT_EQ(x, 77);
    CommCounters after = c.counters();
    EXPECT_EQ(after.msgs_recv - before.msgs_recv, 1u);
    EXPECT_EQ(after.bytes_recv - before.bytes_recv, sizeof x);
  }
  c.barrier(kLong);
}
TEST(InProcComm, TestThenWaitCountsOnce) {
  INPROC_ONLY();
  run_ranks(2, test_then_wait_counts_once);
  run_ranks(3, test_then_wait_counts_once);
}
// Waits after InProcWorld::abort throw an Error naming this rank, the operation and the reason.
TEST(InProcComm, AbortNamesTheOperationAndTheReason) {
  INPROC_ONLY();
  InProcWorld world(4);
  world.abort("rank 3 failed: boom");
  int x = 0;
  try {
    world.comm(0)->recv(&x, sizeof x, 3, 1, kLong);
    FAIL() << "recv after abort returned";
  } catch (const TimeoutError& e) {
    FAIL() << "abort reported as a timeout: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "rank 0: aborted in recv from rank 3 (tag 1): rank 3 failed: boom");
  }
}
// A peer outside 0..size-1 (and kAnySource for a send) is an error naming this rank and the
// peer, on every transport, thrown before anything is counted or handed to MPI (whose own
// error would end the job).
void peer_out_of_range(Comm& c) {
  int x = 0;
  const int n = c.size();
  const CommCounters before = c.counters();
  for (int bad : {n, n + 1, -2, kAnySource}) {
    try {
      c.isend(&x, sizeof x, bad, 36);
      ADD_FAILURE() << "isend to rank " << bad << " of " << n;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.where() + ": peer rank " + std::to_string(bad) +
                                           " out of range (size " + std::to_string(n) + ")"),
                std::string::npos)
          << e.what();
    }
    if (bad != kAnySource) EXPECT_THROW(c.irecv(&x, sizeof x, bad, 36), Error) << bad;
  }
  const CommCounters after = c.counters();
  EXPECT_EQ(after.msgs_sent, before.msgs_sent);
  EXPECT_EQ(after.bytes_sent, before.bytes_sent);
}
TEST(InProcComm, PeerOutOfRange) {
  INPROC_ONLY();
  run_ranks(2, peer_out_of_range);
}
// first_error: every rank gets the lowest failing rank's message, or "" when none failed.
TEST(CommUtil, FirstErrorIsTheLowestFailingRanks) {
  INPROC_ONLY();
  for (std::vector<int> failing : std::vector<std::vector<int>>{{}, {2, 3}, {0, 3}, {3}, {1, 2}}) {
    std::vector<std::string> got(4, "unset");
    run_ranks(4, [&](Comm& c) {
      const bool fails = std::find(failing.begin(), failing.end(), c.rank()) != failing.end();
      got[c.rank()] =
          first_error(c, fails ? "bad on rank " + std::to_string(c.rank()) : "", 37, kLong);
    });
    const std::string want = failing.empty() ? "" : "bad on rank " + std::to_string(failing[0]);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r], want) << "rank " << r;
  }
}

// SubComm: odd ranks of the parent, in reverse order, behave as a communicator of their own.
void sub_comm_cases(std::shared_ptr<Comm> parent) {
  std::vector<int> members;
  for (int r = parent->size() - 1; r >= 0; --r)
    if (r % 2 == 1) members.push_back(r);
  if (parent->rank() % 2 == 1) {
    SubComm sub(parent, members);
    EXPECT_EQ(sub.size(), static_cast<int>(members.size()));
    EXPECT_EQ(sub.parent_rank(sub.rank()), parent->rank());
    ping_pong(sub);
    any_source(sub);
    ring_sendrecv(sub);
    byte_counters(sub);
    sub.barrier(kLong);
  }
  parent->barrier(kLong);
}

TEST(SubComm, InProc) {
  INPROC_ONLY();
  for (int n : {2, 4, 5, 8}) {
    InProcWorld world(n);
    std::vector<std::thread> ts;
    std::vector<std::string> errors(n);
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        try {
          sub_comm_cases(world.comm(r));
        } catch (const std::exception& e) {
          errors[r] = e.what();
          world.abort(e.what());
        }
      });
    for (auto& t : ts) t.join();
    for (auto& e : errors) EXPECT_EQ(e, "");
  }
}
TEST(SubComm, RejectsNonMemberAndDuplicates) {
  INPROC_ONLY();
  InProcWorld world(3);
  EXPECT_THROW(SubComm(world.comm(0), {1, 2}), Error);
  EXPECT_THROW(SubComm(world.comm(0), {0, 0}), Error);
  EXPECT_THROW(SubComm(world.comm(0), {0, 3}), Error);
}

// SubComm rank mapping with members in an order of their own, the parent's timeout, and a
// receive that a non-member's message completes (an error naming that parent rank).
TEST(SubComm, MapsRanksKeepsTimeoutAndRefusesNonMembers) {
  INPROC_ONLY();
  InProcWorld world(4);
  world.comm(0)->set_timeout(Seconds(7.5));
  SubComm a(world.comm(0), {2, 0, 3});
  EXPECT_EQ(a.rank(), 1);
  EXPECT_EQ(a.size(), 3);
  EXPECT_EQ(a.timeout().count(), 7.5);
  EXPECT_EQ(a.sub_rank(3), 2);
  EXPECT_EQ(a.sub_rank(1), -1);
  EXPECT_EQ(a.parent_rank(0), 2);
  std::vector<std::string> errors(4);
  std::vector<std::thread> ts;
  for (int r : {0, 1}) {
    ts.emplace_back([&, r] {
      try {
        if (r == 1) {  // not a member: sends on the sub-communicator's tag anyway
          int v = 9;
          world.comm(1)->send(&v, sizeof v, 0, 38, kLong);
        } else {
          SubComm sub(world.comm(0), {0, 2});
          int x = 0;
          sub.recv(&x, sizeof x, kAnySource, 38, kLong);
          errors[0] = "received";
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(errors[1], "");
  EXPECT_NE(errors[0].find("rank 0: received a message from parent rank 1, which is not a member "
                           "of this sub-communicator"),
            std::string::npos)
      << errors[0];
}
TEST(SubComm, PeerOutOfRange) {
  INPROC_ONLY();
  InProcWorld world(4);
  SubComm sub(world.comm(1), {3, 1});
  peer_out_of_range(sub);
}

TEST(MpiComm, PingPong) {
  MPI_ONLY();
  ping_pong(*mpi_world);
}
TEST(MpiComm, RingSendRecv) {
  MPI_ONLY();
  ring_sendrecv(*mpi_world);
}
TEST(MpiComm, AnySource) {
  MPI_ONLY();
  any_source(*mpi_world);
}
TEST(MpiComm, NonOvertaking) {
  MPI_ONLY();
  non_overtaking(*mpi_world);
}
TEST(MpiComm, ByteCounters) {
  MPI_ONLY();
  byte_counters(*mpi_world);
}
TEST(MpiComm, SilentPeerTimesOut) {
  MPI_ONLY();
  silent_peer(*mpi_world);
}
TEST(MpiComm, TestThenWaitCountsOnce) {
  MPI_ONLY();
  test_then_wait_counts_once(*mpi_world);
}
TEST(MpiComm, PeerOutOfRange) {
  MPI_ONLY();
  peer_out_of_range(*mpi_world);
}
// The highest tag StarRing may use (tags::kMaxTag) goes through; one above it is refused.
TEST(MpiComm, TopTagWorksAndBeyondIsRefused) {
  MPI_ONLY();
  int v = mpi_world->rank(), x = -1;
  const int n = mpi_world->size(), r = mpi_world->rank();
  mpi_world->sendrecv(&v, sizeof v, (r + 1) % n, &x, sizeof x, (r - 1 + n) % n, tags::kMaxTag,
                      kLong);
  EXPECT_EQ(x, (r - 1 + n) % n);
  EXPECT_THROW(mpi_world->isend(&v, sizeof v, (r + 1) % n, tags::kMaxTag + 1), Error);
  EXPECT_THROW(mpi_world->irecv(&x, sizeof x, (r - 1 + n) % n, -1), Error);
}
// A send the peer does not receive (too big to go eagerly) times out naming "send to": rank 0
// gives up, then rank 1 receives it after all, so nothing is left pending at MPI_Finalize.
TEST(MpiComm, UnreceivedSendTimesOutNamingTheSend) {
  MPI_ONLY();
  std::vector<char> big(8 << 20, 1);
  bool eager = false;
  if (mpi_world->rank() == 0) {
    try {
      mpi_world->send(big.data(), big.size(), 1, 39, Seconds(0.3));
      eager = true;  // the transport sent 8 MiB without the receiver: nothing to time out
    } catch (const TimeoutError& e) {
      EXPECT_NE(
          std::string(e.what()).find("rank 0: timeout after 0.3 s in send to rank 1 (tag 39)"),
          std::string::npos)
          << e.what();
    }
  }
  mpi_world->barrier(kLong);
  if (mpi_world->rank() == 1) mpi_world->recv(big.data(), big.size(), 0, 39, kLong);
  mpi_world->barrier(kLong);
  if (eager) GTEST_SKIP() << "8 MiB went eagerly";
}

// sendrecv returns once its send is complete too, so the caller may reuse the send buffer at
// once: here a message too big to go eagerly, overwritten right after the call.
TEST(MpiComm, SendRecvBufferIsFreeOnReturn) {
  MPI_ONLY();
  const int n = mpi_world->size(), r = mpi_world->rank();
  const std::size_t count = std::size_t{4} << 20;  // 16 MiB of floats
  std::vector<float> out(count, static_cast<float>(r)), in(count, -1.0f);
  mpi_world->sendrecv(out.data(), count * 4, (r + 1) % n, in.data(), count * 4, (r - 1 + n) % n, 40,
                      kLong);
  std::fill(out.begin(), out.end(), -7.0f);
  mpi_world->barrier(kLong);
  std::size_t wrong = 0;
  for (float v : in) wrong += v != static_cast<float>((r - 1 + n) % n);
  EXPECT_EQ(wrong, 0u) << "of " << count << " floats from rank " << (r - 1 + n) % n;
}

// A barrier the other ranks reach late times out on rank 0 with a TimeoutError naming the
// barrier; then they complete the barrier it abandoned (MPI cannot cancel one), while rank 0
// keeps MPI progressing in its receives.
TEST(MpiComm, BarrierTimeoutIsATimeoutError) {
  MPI_ONLY();
  const int n = mpi_world->size(), r = mpi_world->rank();
  int go = 1;
  if (r == 0) {
    try {
      mpi_world->barrier(Seconds(0.3));
      ADD_FAILURE() << "barrier without the other ranks returned";
    } catch (const Error& e) {
      EXPECT_NE(dynamic_cast<const TimeoutError*>(&e), nullptr) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 0: timeout after 0.3 s in barrier"),
                std::string::npos)
          << e.what();
    }
    for (int p = 1; p < n; ++p) mpi_world->send(&go, sizeof go, p, 41, kLong);
    for (int p = 1; p < n; ++p) mpi_world->recv(&go, sizeof go, p, 42, kLong);
  } else {
    mpi_world->recv(&go, sizeof go, 0, 41, kLong);
    mpi_world->barrier(kLong);
    mpi_world->send(&go, sizeof go, 0, 42, kLong);
  }
}

TEST(MpiComm, SubComm) {
  MPI_ONLY();
  sub_comm_cases(mpi_world);
}
// The node rank picks the GPU: distinct per host, and equal to the rank when every rank shares
// one host (as under CTest here). Checked against the hostnames the ranks report.
TEST(MpiComm, NodeRankCountsRanksOnThisHost) {
  MPI_ONLY();
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<std::size_t>(mpi_world->size()) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, MPI_COMM_WORLD);
  int before = 0;  // ranks below mine on my host
  for (int r = 0; r < mpi_world->rank(); ++r)
    before += std::string(&all[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]) == name;
  EXPECT_EQ(mpi_world->node_rank(), before);
  InProcWorld world(3);
  EXPECT_EQ(world.comm(2)->node_rank(), 2);
}
TEST(MpiComm, NonMpiCommIsRejectedByMpiCommOf) {
  INPROC_ONLY();
  InProcWorld world(1);
  EXPECT_THROW(mpi_comm_of(*world.comm(0), "backend 'mpi'"), ConfigError);
  MpiComm self(MPI_COMM_WORLD);
  EXPECT_NE(mpi_comm_of(self, "test"), MPI_COMM_NULL);
}

}  // namespace
}  // namespace starring
