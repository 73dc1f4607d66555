// MpiComm (run under mpirun -np 2/3/4; the cases skip when the job has one rank) on the
// scenarios of comm_cases.h, and its own cases.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>

#include "common/kept_memory.h"
#include "tests/common/comm_cases.h"
#include "tests/send_let_go.h"
#include "tests/stall_gate.h"

namespace starring {
namespace {

using namespace starring::testing;

TEST(MpiComm, PingPong) {
  MPI_WORLD_ONLY();
  ping_pong(*mpi_world);
}
TEST(MpiComm, RingSendRecv) {
  MPI_WORLD_ONLY();
  ring_sendrecv(*mpi_world);
}
TEST(MpiComm, AnySource) {
  MPI_WORLD_ONLY();
  any_source(*mpi_world);
}
TEST(MpiComm, NonOvertaking) {
  MPI_WORLD_ONLY();
  non_overtaking(*mpi_world);
}
TEST(MpiComm, ByteCounters) {
  MPI_WORLD_ONLY();
  byte_counters(*mpi_world);
}
TEST(MpiComm, SilentPeerTimesOut) {
  MPI_WORLD_ONLY();
  silent_peer(*mpi_world);
}
TEST(MpiComm, TestThenWaitCountsOnce) {
  MPI_WORLD_ONLY();
  test_then_wait_counts_once(*mpi_world);
}
TEST(MpiComm, PeerOutOfRange) {
  MPI_WORLD_ONLY();
  peer_out_of_range(*mpi_world);
}
// The highest tag StarRing may use (tags::kMaxTag) goes through; one above it is refused.
TEST(MpiComm, TopTagWorksAndBeyondIsRefused) {
  MPI_WORLD_ONLY();
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
  MPI_WORLD_ONLY();
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
  MPI_WORLD_ONLY();
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
  MPI_WORLD_ONLY();
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

// The barrier a timeout abandoned stays pending in MPI, so its communicator must outlive it: every
// rank but the last times out in a barrier on an MpiComm of its own and destroys that MpiComm;
// then the last rank completes the barrier and every rank makes MPI progress. ~MpiComm freed the
// communicator under the pending barrier, and Open MPI's progress of it crashed (np 3 and 4:
// SIGSEGV at address 0xd8 in mca_pml_ob1_isend from NBC_Progress), as the exit's agreement did
// after bench --mode overlap failed on a 0.3 s --timeout.
TEST(MpiComm, ACommunicatorOutlivesTheBarrierATimeoutLeftPending) {
  MPI_WORLD_ONLY();
  const int n = mpi_world->size(), r = mpi_world->rank(), late = n - 1;
  int go = 1;
  {
    MpiComm own(MPI_COMM_WORLD);
    if (r != late) {
      EXPECT_THROW(own.barrier(Seconds(0.2)), TimeoutError);
    } else {
      for (int p = 0; p < late; ++p) mpi_world->recv(&go, sizeof go, p, 43, kLong);
      own.barrier(kLong);  // completes the others' abandoned barrier
    }
    if (r != late) mpi_world->send(&go, sizeof go, late, 43, kLong);
  }
  mpi_world->barrier(kLong);  // progress: the abandoned barrier's schedule runs here
}

// A message longer than its receive buffer is an Error naming the receiving rank, the sender, the
// tag and both sizes, as InProcComm's (MPI_ERRORS_ARE_FATAL ended the job with Open MPI's
// banner); a shorter one than recv_exact was told to expect, an Error as well.
TEST(MpiComm, TruncationAndAShortMessageAreErrorsNamingBothRanks) {
  MPI_WORLD_ONLY();
  char big[16] = {}, small[4];
  if (mpi_world->rank() == 0) {
    mpi_world->send(big, sizeof big, 1, 43, kLong);
    mpi_world->send(big, 2, 1, 44, kLong);
  } else if (mpi_world->rank() == 1) {
    for (int tag : {43, 44}) {
      try {
        if (tag == 43) mpi_world->recv(small, sizeof small, 0, tag, kLong);
        if (tag == 44) recv_exact(*mpi_world, small, sizeof small, 0, tag, kLong, "a note");
        ADD_FAILURE() << "tag " << tag << ": no error";
      } catch (const Error& e) {
        EXPECT_STREQ(e.what(), tag == 43 ? "rank 1: message of 16 bytes from rank 0 (tag 43) "
                                           "truncated: receive buffer holds 4"
                                         : "rank 1: rank 0 sent 2 bytes for a note (tag 44), "
                                           "expected 4");
      }
    }
  }
  mpi_world->barrier(kLong);
}
// A receive abandoned (its request destroyed) after it matched a message too big to go eagerly
// whose sender then makes no MPI call (stopped, stuck) is let go after the communicator's
// timeout. Open MPI cannot cancel a matched receive, and the destructor's MPI_Wait waited for the
// rest of the message, which moves only while the sender makes MPI calls: for good with a stopped
// one (ring-p2p over TCP, rank 0 stopped by SIGSTOP mid-step: rank 1 never ended). Rank 0 sends
// 32 MiB, then makes no MPI call until rank 1 creates a file (outside MPI): once the request is
// gone, or after kLong, and then the case fails instead of hanging. Run over shared memory (the
// _np ctests) and over TCP (test_comm_mpi_tcp_np2).
// The receive let go is noted, and its buffer (a ReceiveVector) kept when freed
// (common/kept_memory.h): rank 1 frees it, allocates one as long filled with a canary, then lets
// rank 0 go on, whose message lands in the kept memory, not in the new buffer. Before, the freed
// buffer was reused (Release: the canary overwritten; ASan: heap-use-after-free in Open MPI's
// copy).
TEST(MpiComm, AnAbandonedReceiveOfAStalledSenderIsLetGo) {
  MPI_WORLD_ONLY();
  const int r = mpi_world->rank();
  const testing::StallGate gate("starring_test_stall");
  constexpr int kTag = 45;
  constexpr std::size_t kBytes = std::size_t{32} << 20;
  // written after the request is gone (and the buffer freed), by rank 0's send
  auto sink = std::make_unique<ReceiveVector<char>>(kBytes);
  const char* kept = nullptr;  // rank 1: the buffer, if it was kept
  std::vector<char> probe;     // rank 1: allocated after the buffer was freed, filled with 0x5A
  if (r < 2) {  // the connection between ranks 0 and 1 up first (TCP opens it on first use)
    int x = r, y = -1;
    mpi_world->sendrecv(&x, sizeof x, 1 - r, &y, sizeof y, 1 - r, kTag, kLong);
  }
  // Rank 1's findings: the transport took the message without the sender's calls; the
  // destructor returned only once rank 0 was let go
  int moved_alone = 0, forced_out = 0;
  if (r == 0) {
    std::vector<char> big(kBytes, 1);
    auto send = mpi_world->isend(big.data(), big.size(), 1, kTag);
    gate.wait(2 * kLong);  // no MPI call meanwhile: a stopped sender
    send->wait(kLong);
  } else if (r == 1) {
    // The message's first part is here: the receive matches it when posted.
    const auto until = Clock::now() + kLong;
    for (int in = 0; !in && Clock::now() < until;)
      MPI_Iprobe(0, kTag, mpi_world->mpi_comm(), &in, MPI_STATUS_IGNORE);
    mpi_world->set_timeout(Seconds(0.5));  // the abandoned receive's limit
    auto recv = mpi_world->irecv(sink->data(), kBytes, 0, kTag);
    mpi_world->set_timeout(kLong);
    try {
      recv->wait(Seconds(0.3));
      moved_alone = 1;
    } catch (const TimeoutError&) {
    }
    std::atomic<bool> gone{false}, forced{false};
    std::thread watchdog([&] {
      const auto until = Clock::now() + kLong;
      while (!gone && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (gone) return;
      forced = true;
      gate.open();  // let rank 0 move, which ends the destructor's wait
    });
    recv.reset();
    gone = true;
    watchdog.join();
    forced_out = forced;
    if (left_to_mpi(sink->data(), kBytes)) kept = sink->data();
    sink.reset();
    probe.assign(kBytes, 0x5A);
    gate.open();
  }
  mpi_world->barrier(2 * kLong);  // rank 0's send completes as rank 1 polls here
  int canary = 1, landed = 0;
  if (r == 1) {
    canary = std::all_of(probe.begin(), probe.end(), [](char c) { return c == 0x5A; });
    landed = kept && kept[0] == 1 && kept[kBytes - 1] == 1;
  }
  int found[4] = {moved_alone, forced_out, canary, landed};
  MPI_Bcast(found, 4, MPI_INT, 1, MPI_COMM_WORLD);  // rank 0 prints the verdict
  if (found[0]) GTEST_SKIP() << "the transport moved 32 MiB without the sender";
  EXPECT_FALSE(found[1]) << "rank 1: the abandoned receive's destructor waited " << kLong.count()
                         << " s for a sender making no MPI call, until the sender was let go";
  EXPECT_TRUE(found[2]) << "rank 1: the buffer of the receive let go was freed, and rank 0's "
                           "message landed in memory allocated after it";
  EXPECT_TRUE(found[3]) << "rank 1: the receive let go was not noted, or its buffer not kept "
                           "and written (common/kept_memory.h)";
}
// A blocking send that times out is let go unfinished as the error unwinds (Comm::send), and MPI
// may still read its buffer should the peer go on and take the message: the send is noted
// (Request::note_if_unfinished) and its owner, a ReceiveVector, keeps the memory
// (common/kept_memory.h). Before, the buffer was freed, and rank 0 got what was put there next.
TEST(MpiComm, ASendLetGoMayStillReadIsNotFreed) {
  MPI_WORLD_ONLY();
  constexpr int kTag = 46;                               // and 47, 48 (send_let_go.h)
  constexpr std::size_t kFloats = std::size_t{8} << 20;  // 32 MiB
  const std::string got = send_let_go_read_kept(*mpi_world, kTag, kFloats, kFloats, [&](auto& buf) {
    EXPECT_THROW(mpi_world->send(buf.data(), kFloats * sizeof(float), 0, kTag, Seconds(0.5)),
                 TimeoutError);
  });
  EXPECT_EQ(got, "") << "rank 1: the buffer of a send that timed out was freed under MPI, and "
                        "rank 0 received the memory allocated after it";
}
TEST(MpiComm, SubComm) {
  MPI_WORLD_ONLY();
  sub_comm_cases(mpi_world);
}
// The node rank picks the GPU: distinct per host, and equal to the rank when every rank shares
// one host (as under CTest here). Checked against the hostnames the ranks report.
TEST(MpiComm, NodeRankCountsRanksOnThisHost) {
  MPI_WORLD_ONLY();
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
