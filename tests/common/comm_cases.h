// Shared by test_comm.cc (in-process Comm, SubComm) and test_comm_mpi.cc (MpiComm): each
// scenario is one function of a Comm, run on both implementations.
#pragma once
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
#include "tests/mpi_world.h"
#include "tests/scheduling_lag.h"

namespace starring::testing {

using Clock = std::chrono::steady_clock;
constexpr Seconds kLong{20.0};

// MPI_ONLY() (tests/mpi_world.h), then `mpi_world`: an MpiComm over every rank of the job.
#define MPI_WORLD_ONLY()                                      \
  MPI_ONLY();                                                 \
  auto mpi_world = std::make_shared<MpiComm>(MPI_COMM_WORLD); \
  mpi_world->set_timeout(kLong)

inline float value(int rank, int i) { return static_cast<float>(rank * 1000 + i % 997); }

inline void ping_pong(Comm& c) {
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

inline void ring_sendrecv(Comm& c) {
  const int n = c.size(), r = c.rank();
  std::vector<float> out(64), in(64, -1);
  for (int i = 0; i < 64; ++i) out[i] = value(r, i);
  c.sendrecv(out.data(), 256, (r + 1) % n, in.data(), 256, (r - 1 + n) % n, 9, kLong);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(in[i], value((r - 1 + n) % n, i));
}

inline void any_source(Comm& c) {
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
inline void non_overtaking(Comm& c) {
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

inline void byte_counters(Comm& c) {
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
inline void silent_peer(Comm& c) {
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

// A receive completed by test() and then waited on counts its bytes once.
inline void test_then_wait_counts_once(Comm& c) {
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

// A peer outside 0..size-1 (and kAnySource for a send) is an error naming this rank and the
// peer, on every transport, thrown before anything is counted or handed to MPI (whose own
// error would end the job).
inline void peer_out_of_range(Comm& c) {
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

// SubComm: odd ranks of the parent, in reverse order, behave as a communicator of their own.
inline void sub_comm_cases(std::shared_ptr<Comm> parent) {
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

}  // namespace starring::testing
