// The in-process Comm (threads), comm_util and SubComm, on the scenarios of comm_cases.h; the
// same scenarios over MPI are test_comm_mpi.cc.
#include <gtest/gtest.h>
#include <mpi.h>

#include "tests/common/comm_cases.h"
#include "tests/ps/forwarding_comm.h"

namespace starring {
namespace {

using namespace starring::testing;

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

// A failure note carries the failing rank's kind, rank and message; a bystander throws it, of
// the same kind, naming that rank once (its message's own "rank R: " is dropped).
TEST(CommUtil, FailureNotesNameTheFailingRankOnceAndKeepTheirKind) {
  const std::string bad = failure_note(ConfigError("rank 3: data/x is truncated"), 3);
  EXPECT_EQ(bad, "C3 rank 3: data/x is truncated");
  EXPECT_EQ(failure_note_message(bad), "rank 3: data/x is truncated");
  try {
    throw_peer_failure("rank 0", bad, "could not load its data");
    ADD_FAILURE() << "throw_peer_failure returned";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "rank 0: stopping, rank 3 could not load its data: data/x is truncated");
  }
  const std::string other = failure_note(Error("out of memory"), 12);
  try {
    throw_peer_failure("rank 1", other, "could not set up training");
    ADD_FAILURE() << "throw_peer_failure returned";
  } catch (const ConfigError&) {
    ADD_FAILURE() << "an Error's note was thrown as bad input";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 1: stopping, rank 12 could not set up training: out of memory");
  }
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
// A size or count a peer sends is checked, not trusted: a message of another size than both
// sides agreed is an error naming both ranks (not a value half filled in); a length beyond the
// receiver's limit is refused before any memory is taken for it; and one past the bytes that
// follow is caught at the first piece, with memory only for that piece (not std::string(n)).
TEST(CommUtil, ReceivedSizesAreCheckedNotTrusted) {
  INPROC_ONLY();
  const std::uint64_t huge = std::uint64_t{1} << 40;
  std::vector<std::string> errors;
  run_ranks(2, [&](Comm& c) {
    if (c.rank() == 1) {
      const int four = 4;
      c.send(&four, sizeof four, 0, 7, kLong);
      c.send(&huge, sizeof huge, 0, 8, kLong);
      c.send(&huge, sizeof huge, 0, 9, kLong);
      c.send("short", 5, 0, 9, kLong);
      return;
    }
    const auto error_of = [&](const std::function<void()>& f) {
      try {
        f();
        errors.push_back("no error");
      } catch (const Error& e) {
        errors.push_back(e.what());
      }
    };
    std::uint64_t v = 0;
    error_of([&] { recv_exact(c, &v, sizeof v, 1, 7, kLong, "a count"); });
    error_of([&] { recv_text(c, 1, 8, kLong, 1000, "a note"); });
    error_of([&] { recv_text(c, 1, 9, kLong, UINT64_MAX, "a file"); });
  });
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0], "rank 0: rank 1 sent 4 bytes for a count (tag 7), expected 8");
  EXPECT_EQ(errors[1],
            "rank 0: rank 1 sent a length of 1099511627776 bytes for a note (tag 8), more than "
            "the 1000 it can be");
  EXPECT_EQ(errors[2], "rank 0: rank 1 sent 5 bytes for a file (tag 9), expected 268435456");
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

// A rank that never takes part (stopped while loading its data): the ranks that time out name
// it, not rank 0, which the others wait for (they read "timeout ... in recv from rank 0").
TEST(CommUtil, FirstErrorTimeoutNamesTheSilentRank) {
  INPROC_ONLY();
  std::vector<std::string> got(3);
  run_ranks(3, [&](Comm& c) {
    if (c.rank() == 1) return;  // silent
    try {
      first_error(c, "", 37, Seconds(1.0));
      got[c.rank()] = "returned";
    } catch (const TimeoutError& e) {
      got[c.rank()] = e.what();
    }
  });
  for (int r : {0, 2}) {
    EXPECT_NE(got[r].find("timeout"), std::string::npos) << got[r];
    EXPECT_NE(got[r].find("rank 1 did not (silent, slow or elsewhere)"), std::string::npos)
        << "rank " << r << ": " << got[r];
  }
}

// What first_error (tag 37) gives this rank: "returned", or its timeout's message.
std::string first_error_outcome(Comm& c, Seconds timeout) {
  try {
    first_error(c, "", 37, timeout);
    return "returned";
  } catch (const TimeoutError& e) {
    return e.what();
  }
}

// Of 3 ranks, 0 and 2 came and name rank 1 alone as the one that did not.
void expect_only_rank_1_named(const std::vector<std::string>& got) {
  for (int r : {0, 2})
    EXPECT_NE(got[r].find("; rank " + std::to_string(2 - r) +
                          " got here too, rank 1 did not (silent, slow or elsewhere)"),
              std::string::npos)
        << got[r];
}

// A rank that gets there late but within the timeout (it loaded its data 1.8 s after the
// others) is not named with the silent one: the census, taken at the timeout over 1.5 s, did not
// hear its note, which it sent only at its own timeout 1.8 s later ("ranks 1 and 2 did not").
TEST(CommUtil, FirstErrorTimeoutDoesNotNameALateRank) {
  INPROC_ONLY();
  std::vector<std::string> got(3);
  run_ranks(3, [&](Comm& c) {
    if (c.rank() == 1) return;  // silent
    if (c.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(1800));
    got[c.rank()] = first_error_outcome(c, Seconds(2.0));
  });
  expect_only_rank_1_named(got);
}

// A successful first_error takes every peer's arrival note, so that none is left to stand in for
// that peer in a later call on the same Comm: rank 1, silent in the second call, is named there.
TEST(CommUtil, FirstErrorLeavesNoArrivalNoteForALaterCall) {
  INPROC_ONLY();
  std::vector<std::string> got(3);
  run_ranks(3, [&](Comm& c) {
    EXPECT_EQ(first_error(c, "", 37, kLong), "");
    if (c.rank() == 1) return;  // silent in the second call
    got[c.rank()] = first_error_outcome(c, Seconds(1.0));
  });
  expect_only_rank_1_named(got);
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

// A collective left pending on a SubComm's transport is one on its parent's communicator, which
// carries the SubComm's messages: the SubComm passes the mark on (MpiComm then keeps its MPI
// communicator); an InProcComm, with no MPI communicator to keep, ignores it.
TEST(SubComm, PassesACollectiveLeftPendingToItsParent) {
  INPROC_ONLY();
  struct Parent : ps::ForwardingComm {
    using ForwardingComm::ForwardingComm;
    void collective_left_pending() noexcept override { ++marks; }
    int marks = 0;
  };
  InProcWorld world(2);
  auto parent = std::make_shared<Parent>(world.comm(1));
  SubComm sub(parent, {1});
  sub.collective_left_pending();
  EXPECT_EQ(parent->marks, 1);
  world.comm(0)->collective_left_pending();  // a no-op
}

}  // namespace
}  // namespace starring
