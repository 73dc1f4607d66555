// Ring all-reduce and the mpi engine under mpirun (the np of the job): the closed form over the
// shared-memory and the point-to-point paths, wire compression, silent peers, a shared-memory ring
// that failed, and memory a receive let go may still write into. The in-process cases are in
// test_ring.cc (same binary), the shared-memory path's own in test_shm_ring.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/allreducer.h"
#include "allreduce/private_comm.h"
#include "allreduce/ring_allreduce.h"
#include "allreduce/wire_codec.h"
#include "common/error.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/allreduce/ring_test_cases.h"
#include "tests/scheduling_lag.h"
#include "tests/send_let_go.h"
#include "tests/stall_gate.h"

namespace starring {
namespace {

using namespace starring::test;
using Clock = std::chrono::steady_clock;

RingOptions over_comm(RingOptions o) {
  o.shared_memory = false;
  return o;
}

// Under mpirun on one node the ring takes the shared-memory path (ShmRing); over_comm() forces
// the MPI point-to-point path. Both must match the closed form (test_shm_ring.cc: more of the
// shared-memory path). With 4 KiB segments the largest count is 100003 floats, as in-process
// (RingInProc.ClosedFormAllRanksAndCounts).
TEST(RingMpi, ClosedForm) {
  MPI_ONLY();
  auto world = mpi_world();
  for (const bool comm : {false, true})
    for (const bool small : {false, true}) {
      const RingOptions opt = small ? small_segments() : RingOptions{};
      auto eng = make_ring_allreducer(world, comm ? over_comm(opt) : opt);
      check_engine(*eng, *world, small ? 100003 : 0);
    }
}

// A backend's private Comm (allreduce/private_comm.h) waits as long as the world it was made
// from (--timeout): under MPI it is a new MpiComm, whose own default the other cases never noticed.
TEST(RingMpi, PrivateCommKeepsTheWorldsTimeout) {
  MPI_ONLY();
  auto world = mpi_world(Seconds(7.5));
  EXPECT_EQ(private_comm(world)->timeout().count(), 7.5);
}

// Half wire under MPI (rendezvous sends, not the in-process eager ones): the closed-form sums
// are small integers, exact in fp16 and bf16.
TEST(RingMpi, CompressedWireClosedForm) {
  MPI_ONLY();
  auto world = mpi_world();
  const int n = world->size();
  for (WireType w : {WireType::kFloat16, WireType::kBFloat16}) {
    RingOptions o = small_segments();
    o.wire = w;
    RingAllreduce ring(*world, o);
    for (std::size_t count : test_counts(n)) {
      auto in = closed_form_input(world->rank(), count);
      std::vector<float> out(count, -1.0f);
      ring.run(in.data(), out.data(), count, 1.0f);
      EXPECT_EQ(count_wrong(out.data(), count, n, 1.0f), 0) << wire_type_name(w) << " " << count;
      ring.run(in.data(), in.data(), count, 1.0f);
      EXPECT_EQ(count_wrong(in.data(), count, n, 1.0f), 0) << "in place " << count;
    }
  }
}

// Every rank count, 1 included: the plain test runs it on a world of one rank. The largest count
// is 100003 floats: the engine hands any count up to INT32_MAX to MPI whole (1000003 made this
// case 12.6 s of np 8's 40 s at load 7).
TEST(MpiEngine, ClosedFormBlockingAndNonBlocking) {
  auto world = mpi_world();
  for (MpiMode m : {MpiMode::kBlocking, MpiMode::kNonBlocking}) {
    auto eng = make_mpi_allreducer(world, m, Seconds(30));
    check_engine(*eng, *world, 100003);
  }
}

// The MPI_Iallreduce a timeout leaves pending keeps its communicator (common/mpi_comm.h): every
// rank but the last times out in the mpi engine on an MpiComm of its own and destroys both; then
// the last rank completes the all-reduce and every rank makes MPI progress. ~MpiComm freed the
// communicator under the pending collective, and Open MPI's progress of it crashed (np 3, 4). The
// buffer is static: the abandoned all-reduce may write it until it completes.
TEST(MpiEngine, ACommunicatorOutlivesTheAllreduceATimeoutLeftPending) {
  MPI_ONLY();
  auto world = mpi_world();
  const int n = world->size(), r = world->rank(), late = n - 1;
  static std::vector<float> v(1000, 1.0f);
  int go = 1;
  {
    auto own = std::make_shared<MpiComm>(MPI_COMM_WORLD);
    auto eng = make_mpi_allreducer(own, MpiMode::kNonBlocking, Seconds(0.2));
    if (r != late) {
      EXPECT_THROW(eng->run(v.data(), v.data(), v.size(), 1.0f), TimeoutError);
      world->send(&go, sizeof go, late, tags::kRingBase + 4646, Seconds(30));
    } else {
      for (int p = 0; p < late; ++p)
        world->recv(&go, sizeof go, p, tags::kRingBase + 4646, Seconds(30));
      eng->run(v.data(), v.data(), v.size(), 1.0f);  // completes the others' abandoned one
    }
  }
  world->barrier(Seconds(30));  // progress: the abandoned all-reduce's schedule runs here
}

// ring == mpi on data that is not exactly representable sums: equal within float reassociation.
TEST(RingMpi, RingEqualsMpiAllreduce) {
  MPI_ONLY();
  auto world = mpi_world();
  auto ring = make_ring_allreducer(world, small_segments());
  auto mpi = make_mpi_allreducer(world, MpiMode::kBlocking, Seconds(30));
  const std::size_t count = 300007;
  std::vector<float> in(count), a(count), b(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = std::sin(0.37f * i + world->rank());
  ring->run(in.data(), a.data(), count, 1.0f / world->size());
  mpi->run(in.data(), b.data(), count, 1.0f / world->size());
  for (std::size_t i = 0; i < count; ++i) ASSERT_NEAR(a[i], b[i], 4e-7f) << i;
}

// Keep these last: the messages they abandon (the ring's on its own tag, the census notes sent to
// the silent rank on tags::kCensus) must not meet a later case.
TEST(RingMpi, SilentPeerTimesOut) {
  MPI_ONLY();
  auto world = mpi_world();
  RingOptions o;
  o.timeout = Seconds(0.5);
  o.tag = tags::kRingBase + 4242;
  auto eng = make_ring_allreducer(world, o);
  expect_timeout(*world, *eng, world->size() - 1, 0.5);
  world->barrier(Seconds(30));
}

// A rank whose shared-memory ring failed leaves it at once, without waiting for the peer it
// timed out on: that peer arrives only once the others have left (each tells it so; a hung peer
// never would arrive, and a rank that waited for it would wait until the late rank gives up after
// 60 s), and that late rank, whose ring did not fail, does not wait long either: nobody frees the
// window, nobody hangs. "Long" is 1.5 s plus how late this process ran meanwhile (the control,
// tests/scheduling_lag.h); a rank that waited for its peers' votes would wait 120 s.
TEST(RingMpi, FailedSharedMemoryRingIsLeftAtOnce) {
  MPI_ONLY();
  auto world = mpi_world();
  RingOptions o;
  o.timeout = Seconds(0.3);
  auto eng = make_ring_allreducer(world, o);
  const int late = world->size() - 1, left_tag = tags::kRingBase + 4343;
  if (world->rank() == late) {
    for (int r = 0; r < late; ++r) {
      char left = 0;
      EXPECT_NO_THROW(world->recv(&left, 1, r, left_tag, Seconds(60)))
          << "rank " << r << " did not leave its failed ring";
    }
  } else {
    auto in = closed_form_input(world->rank(), 64 * world->size());
    std::vector<float> out(in.size());
    EXPECT_THROW(eng->run(in.data(), out.data(), in.size(), 1.0f), TimeoutError);
  }
  starring::testing::SchedulingLag lag;
  const auto t0 = Clock::now();
  eng.reset();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count(), behind = lag.stop();
  EXPECT_LT(took, 1.5 + behind) << "rank " << world->rank()
                                << " waited for its peers to leave a failed ring; this process ran "
                                << behind << " s late meanwhile";
  if (world->rank() != late) {
    const char left = 1;
    world->send(&left, 1, late, left_tag, Seconds(30));
  }
  world->barrier(Seconds(30));
}

// A rank whose ring fails while a receive has matched the message of a sender stopped
// mid-message lets that receive go unfinished after the timeout (common/mpi_comm.cc); MPI may
// still write the rest of the message should the sender go on, so the memory it writes into is
// kept, not freed (common/kept_memory.h): here the ring's own scratch. Rank 0 stands in for
// rank 1's predecessor: it sends the first segment (32 MiB: far above the eager limit) and then
// makes no MPI call until rank 1 creates a file, which it does once its ring failed and was
// destroyed and it allocated a buffer of the scratch's size filled with a canary. Before, the
// scratch was freed with the ring, and the sender's data landed in that new buffer (Release:
// the canary overwritten; ASan: heap-use-after-free in Open MPI's copy).
TEST(RingMpi, MemoryAReceiveLetGoMayStillWriteIsNotFreed) {
  MPI_ONLY();
  if (mpi_world_size() != 2) GTEST_SKIP() << "a two-rank case";
  const Seconds kLong(20);
  auto world = mpi_world(Seconds(0.5));  // the let-go receive's limit (taken when it is posted)
  const int r = world->rank();
  const starring::testing::StallGate gate("starring_test_ring_stall");
  constexpr std::size_t kChunk = std::size_t{8} << 20;  // floats: 32 MiB, one segment a chunk
  const std::size_t bytes = kChunk * sizeof(float);
  RingOptions o;
  o.segment_bytes = bytes;
  o.window = 1;  // one segment of scratch
  o.timeout = Seconds(0.5);
  o.shared_memory = false;
  o.tag = tags::kRingBase + 4444;
  {  // the connection up first (TCP opens it on first use)
    int x = r, y = -1;
    world->sendrecv(&x, sizeof x, 1 - r, &y, sizeof y, 1 - r, o.tag + 1, kLong);
  }
  std::vector<float> grads(2 * kChunk, 1.0f);  // rank 1's: its first send reads them to the end
  int canary_kept = 1;
  if (r == 0) {
    std::vector<float> seg(kChunk, 2.0f), theirs(kChunk);
    auto send = world->isend(seg.data(), bytes, 1, o.tag);
    gate.wait(2 * kLong);                                // no MPI call meanwhile: a stopped sender
    world->recv(theirs.data(), bytes, 1, o.tag, kLong);  // rank 1's own chunk, its first send
    send->wait(kLong);
  } else {
    const auto until = Clock::now() + kLong;  // the message's first part here: matched at once
    for (int in = 0; !in && Clock::now() < until;)
      MPI_Iprobe(0, o.tag, mpi_comm_of(*world, "test"), &in, MPI_STATUS_IGNORE);
    {
      RingAllreduce ring(*world, o);
      EXPECT_THROW(ring.run(grads.data(), grads.data(), grads.size()), TimeoutError);
    }
    std::vector<unsigned char> probe(bytes, 0x5A);  // where freed scratch would be reused
    gate.open();                                    // rank 0 goes on
    world->barrier(kLong);                          // its message lands meanwhile
    canary_kept =
        std::all_of(probe.begin(), probe.end(), [](unsigned char c) { return c == 0x5A; });
  }
  if (r == 0) world->barrier(kLong);
  MPI_Bcast(&canary_kept, 1, MPI_INT, 1, MPI_COMM_WORLD);  // rank 0 prints the verdict
  EXPECT_TRUE(canary_kept) << "rank 1: the scratch of the failed ring was freed under the receive "
                              "it let go, and the stopped sender's data landed in memory reused";
}

// The sends a failed ring leaves unfinished stay until its next run or its end, and MPI may read
// their buffers later still (the successor, stopped before it took them, goes on): the caller's
// gradients here, which it frees as the error unwinds. They are noted as the failure leaves
// run() and their owner, a ReceiveVector (as the trainer's Staging), keeps them. Rank 1's ring
// sends its chunk (32 MiB, one segment) to rank 0, which posts no receive, and times out
// waiting for rank 0's; rank 0 takes the message only once rank 1 freed its gradients and
// allocated as much again with a canary. Before, rank 0 received the canary.
TEST(RingMpi, MemoryASendLetGoMayStillReadIsNotFreed) {
  MPI_ONLY();
  if (mpi_world_size() != 2) GTEST_SKIP() << "a two-rank case";
  auto world = mpi_world(Seconds(0.5));
  constexpr std::size_t kChunk = std::size_t{8} << 20;  // floats: 32 MiB, one segment a chunk
  RingOptions o;
  o.segment_bytes = kChunk * sizeof(float);
  o.timeout = Seconds(0.5);
  o.shared_memory = false;
  o.tag = tags::kRingBase + 4545;  // and + 1, + 2 (send_let_go.h)
  const std::string got =
      testing::send_let_go_read_kept(*world, o.tag, 2 * kChunk, kChunk, [&](auto& g) {
        RingAllreduce ring(*world, o);  // rank 1's chunk is the second half: its first send
        EXPECT_THROW(ring.run(g.data(), g.data(), g.size()), TimeoutError);
      });
  EXPECT_EQ(got, "") << "rank 1: the gradients a failed ring was sending from were freed under "
                        "MPI, and rank 0 received the memory allocated after them";
}

}  // namespace
}  // namespace starring
