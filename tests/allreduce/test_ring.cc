// Ring all-reduce and the mpi engine against the closed form, in-process (ranks 1,2,3,4,8)
// and under mpirun (the np of the job); wire compression; silent peers. The shared-memory path's
// own cases are in test_shm_ring.cc, the nccl engine's in test_engines.cc.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <thread>

#include "allreduce/allreducer.h"
#include "allreduce/private_comm.h"
#include "allreduce/ring_allreduce.h"
#include "allreduce/wire_codec.h"
#include "common/comm_util.h"
#include "common/device.h"
#include "common/error.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/scheduling_lag.h"
#include "tests/stall_gate.h"

namespace starring {
namespace {

using namespace starring::test;
using Clock = std::chrono::steady_clock;

// Every count x in-place/out-of-place x sum/average/a caller's own scale on one rank of `comm`.
// The own scale (0.25: exact on the closed form) is what a single rank must apply too, where the
// average's 1/N is 1: the ring's one-rank path dropped it and every case here still passed.
// `large`: the largest count in place of test_counts' own.
void check_engine(Allreducer& eng, Comm& comm, std::size_t large = 0) {
  const int n = comm.size(), r = comm.rank();
  std::vector<std::size_t> counts = test_counts(n);
  if (large) counts.back() = large;
  for (std::size_t count : counts) {
    auto in = closed_form_input(r, count);
    for (float scale : {1.0f, 1.0f / n, 0.25f}) {
      std::vector<float> out(count, -1.0f);
      eng.run(in.data(), out.data(), count, scale);
      EXPECT_EQ(count_wrong(out.data(), count, n, scale), 0)
          << eng.name() << " out-of-place, ranks " << n << " count " << count << " rank " << r;
      std::vector<float> inplace = in;
      eng.run(inplace.data(), inplace.data(), count, scale);
      EXPECT_EQ(count_wrong(inplace.data(), count, n, scale), 0)
          << eng.name() << " in-place, ranks " << n << " count " << count << " rank " << r;
      // Buffers that are not 16-byte aligned (a bucket starts anywhere in the flat buffer).
      std::vector<float> in1(count + 1), out1(count + 1, -1.0f);
      std::copy(in.begin(), in.end(), in1.begin() + 1);
      eng.run(in1.data() + 1, out1.data() + 1, count, scale);
      EXPECT_EQ(count_wrong(out1.data() + 1, count, n, scale), 0)
          << eng.name() << " unaligned, ranks " << n << " count " << count << " rank " << r;
    }
  }
}

// With 4 KiB segments the large count is 100003 floats (each rank's chunk 12 or more segments
// at 8 ranks): 1000003, as with the default 1 MiB segments, made this case 12.4-13.4 s, not
// 6.4-7.3 s (load 8-10).
TEST(RingInProc, ClosedFormAllRanksAndCounts) {
  INPROC_ONLY();
  for (int n : {1, 2, 3, 4, 8}) {
    for (const bool small : {false, true}) {
      inproc(n, [&](std::shared_ptr<Comm> c) {
        auto eng = make_ring_allreducer(c, small ? small_segments() : RingOptions{});
        check_engine(*eng, *c, small ? 100003 : 0);
      });
    }
  }
}

TEST(RingInProc, SendsTwoNMinusOneOverNOfTheBuffer) {
  INPROC_ONLY();
  for (int n : {2, 3, 4, 8}) {
    inproc(n, [&](std::shared_ptr<Comm> c) {
      const std::size_t count = 16 * 1024 * static_cast<std::size_t>(n);  // exact chunks
      RingAllreduce ring(*c, small_segments());
      auto in = closed_form_input(c->rank(), count);
      std::vector<float> out(count);
      CommCounters before = c->counters();
      ring.run(in.data(), out.data(), count);
      CommCounters after = c->counters();
      const std::uint64_t expect = 2ull * (n - 1) * count * 4 / n;
      EXPECT_EQ(after.bytes_sent - before.bytes_sent, expect);
      EXPECT_EQ(after.bytes_recv - before.bytes_recv, expect);
      EXPECT_EQ(ring.wire_bytes_per_run(count), expect);
    });
  }
}

// A segment far larger than any chunk: the scratch it receives into is sized by the run, not by
// segment_bytes (which sized it window x segment_bytes at construction: --segment-bytes 256M
// zeroed 1 GiB per rank for a 1 MiB all-reduce, and 1 TiB here failed with std::bad_alloc).
TEST(RingInProc, HugeSegmentCostsOnlyWhatTheRunReceives) {
  INPROC_ONLY();
  RingOptions o;
  o.segment_bytes = std::size_t{1} << 40;
  for (int n : {2, 3}) {
    for (WireType w : {WireType::kFloat32, WireType::kFloat16}) {
      o.wire = w;
      inproc(n, [&](std::shared_ptr<Comm> c) {
        RingAllreduce ring(*c, o);
        for (std::size_t count : {std::size_t{1000}, std::size_t{100003}}) {
          auto in = closed_form_input(c->rank(), count);
          std::vector<float> out(count, -1.0f);
          ring.run(in.data(), out.data(), count, 1.0f);
          EXPECT_EQ(count_wrong(out.data(), count, n, 1.0f), 0)
              << wire_type_name(w) << " ranks " << n << " count " << count;
        }
      });
    }
  }
}

// Half-precision wire: within the rounding of one narrowing per hop, bit-identical on every
// rank, and half the bytes.
TEST(RingInProc, CompressedWireWithinToleranceAndIdenticalOnAllRanks) {
  INPROC_ONLY();
  for (WireType w : {WireType::kFloat16, WireType::kBFloat16}) {
    for (int n : {2, 3, 4, 8}) {
      const std::size_t count = 100003;
      std::vector<std::vector<float>> results(n);
      std::vector<std::uint64_t> sent(n);
      inproc(n, [&](std::shared_ptr<Comm> c) {
        RingOptions o = small_segments();
        o.wire = w;
        RingAllreduce ring(*c, o);
        std::vector<float> in(count), out(count);
        for (std::size_t i = 0; i < count; ++i)
          in[i] = std::sin(0.001f * static_cast<float>(i) + c->rank());
        auto before = c->counters().bytes_sent;
        ring.run(in.data(), out.data(), count, 1.0f / n);
        sent[c->rank()] = c->counters().bytes_sent - before;
        EXPECT_EQ(sent[c->rank()], ring.wire_bytes_per_run(count));
        RingAllreduce f32(*c, small_segments());
        EXPECT_EQ(2 * sent[c->rank()], f32.wire_bytes_per_run(count)) << "half the bytes";
        results[c->rank()] = out;
      });
      // Relative precision of the wire format; each of the 2(N-1) hops narrows once.
      const double eps = w == WireType::kFloat16 ? 1.0 / 2048 : 1.0 / 256;
      double max_err = 0;
      for (std::size_t i = 0; i < count; ++i) {
        double exact = 0;
        for (int r = 0; r < n; ++r) exact += std::sin(0.001f * static_cast<float>(i) + r);
        exact /= n;
        max_err = std::max(max_err, std::abs(results[0][i] - exact));
        for (int r = 1; r < n; ++r) ASSERT_EQ(results[r][i], results[0][i]) << "rank " << r;
      }
      EXPECT_LE(max_err, n * eps) << wire_type_name(w) << " ranks " << n;
      EXPECT_GT(max_err, 0.0) << "compression changed nothing: is the wire really narrowed?";
    }
  }
}

// Whether a census clause ("; ranks 1 and 3 did not ...", "; rank 3 did not ...", or "...,
// ranks 0 and 3 did not ...") lists rank r among the ranks that did not time out.
bool census_names_quiet(const std::string& msg, int r) {
  const std::size_t end = msg.find(" did not");
  if (end == std::string::npos) return false;
  const std::size_t start = msg.rfind("rank", end);  // "rank " or "ranks "
  if (start == std::string::npos) return false;
  std::istringstream list(msg.substr(start, end - start));
  std::string word;
  while (list >> word) {
    if (!word.empty() && word.back() == ',') word.pop_back();
    if (word == std::to_string(r)) return true;
  }
  return false;
}

TEST(Census, TheQuietRanksAreReadFromEveryFormOfTheClause) {
  const std::string m0 = "rank 0: timeout after 0.3 s in ring all-reduce step 0, recv from rank 2";
  EXPECT_TRUE(census_names_quiet(m0 + "; rank 2 did not time out here (silent, ...)", 2));
  EXPECT_TRUE(census_names_quiet(m0 + "; ranks 1 and 2 did not time out here (silent, ...)", 2));
  EXPECT_TRUE(census_names_quiet(m0 + "; rank 1 timed out here too, ranks 0, 2 and 3 did not", 2));
  EXPECT_FALSE(census_names_quiet(m0 + "; rank 2 timed out here too, ranks 1 and 3 did not", 2));
  EXPECT_FALSE(census_names_quiet(m0 + "; ranks 1 and 3 did not time out here (silent)", 2));
  EXPECT_FALSE(census_names_quiet(m0, 2)) << "no census clause";
}

// A silent peer: the others fail with TimeoutError naming themselves and the peer, in time: not
// before the timeout, and not far beyond it plus how late this process ran meanwhile (the
// control, tests/scheduling_lag.h: under TSan on a loaded machine, 12.9 s against 7 s once).
void expect_timeout(Comm& c, Allreducer& eng, int silent, double timeout_s) {
  if (c.rank() == silent) return;
  auto in = closed_form_input(c.rank(), 64 * c.size());
  std::vector<float> out(in.size());
  starring::testing::SchedulingLag lag;
  auto t0 = Clock::now();
  try {
    eng.run(in.data(), out.data(), in.size(), 1.0f);
    ADD_FAILURE() << "all-reduce with a silent peer returned";
  } catch (const TimeoutError& e) {
    double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    const double late = lag.stop();
    std::string msg = e.what();
    EXPECT_NE(msg.find(c.where() + ": timeout after"), std::string::npos) << msg;
    if (eng.name() == "ring" && c.rank() == (silent + 1) % c.size()) {
      EXPECT_NE(msg.find("from rank " + std::to_string(silent)), std::string::npos) << msg;
      // and the step it waits in: its first receive, from the peer that never sent (the
      // shared-memory ring, used under mpirun, says how many segments it still waits for)
      if (msg.find("shared-memory ring") == std::string::npos)
        EXPECT_NE(msg.find("ring all-reduce step 0, recv from rank " + std::to_string(silent)),
                  std::string::npos)
            << msg;
    }
    // The census names the silent rank on every rank, not only on its successor: among those
    // that did not time out ("rank 3 did not", or with a slow one beside it "ranks 0 and 3 did
    // not", which under TSan at load 5 a 0.3 s timeout gave).
    EXPECT_TRUE(census_names_quiet(msg, silent)) << msg;
    EXPECT_GE(waited, timeout_s) << "timeout fired early";
    EXPECT_LT(waited, timeout_s * (c.size() + 1) + 5 + late)
        << "timeout fired far too late; this process ran " << late << " s late meanwhile";
  }
}

TEST(RingInProc, SilentPeerTimesOut) {
  INPROC_ONLY();
  for (int n : {2, 3, 4}) {
    inproc(n, [&](std::shared_ptr<Comm> c) {
      RingOptions o;
      o.timeout = Seconds(0.3);
      auto eng = make_ring_allreducer(c, o);
      expect_timeout(*c, *eng, n - 1, 0.3);
    });
  }
}

// A Comm over another one (an InProcComm) for a successor that dies in the ring's last step:
// its sends on `tag` to rank `to` complete as MPI's rendezvous sends do, only once `to` has
// posted the matching receive (the k-th send, the k-th receive: matching is in order), counted
// in `posted`, which the dying rank's own DyingComm keeps. Their bytes are delivered at once.
class RendezvousComm : public Comm {
 public:
  RendezvousComm(std::shared_ptr<Comm> inner, int to, int tag, const std::atomic<int>& posted)
      : inner_(std::move(inner)), to_(to), tag_(tag), posted_(posted) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void barrier(Seconds timeout) override { inner_->barrier(timeout); }
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    return inner_->irecv(buf, bytes, peer, tag);
  }
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    auto r = inner_->isend(buf, bytes, peer, tag);
    if (peer != to_ || tag != tag_) return r;
    return std::make_unique<Matched>(*this, std::move(r), ++sent_);
  }

 private:
  class Matched : public Request {
   public:
    Matched(RendezvousComm& c, std::unique_ptr<Request> r, int k)
        : c_(c), r_(std::move(r)), k_(k) {}
    bool test() override { return c_.posted_.load() >= k_ && r_->test(); }
    RecvStatus wait(Seconds timeout) override {  // as MpiRequest::wait words its timeout
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
      while (!test())
        if (Clock::now() >= deadline)
          throw TimeoutError(timeout_message(c_, timeout, describe_op(true, c_.to_, c_.tag_)));
        else
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return r_->status();
    }
    RecvStatus status() const override { return r_->status(); }

   private:
    RendezvousComm& c_;
    std::unique_ptr<Request> r_;
    const int k_;
  };
  std::shared_ptr<Comm> inner_;
  const int to_, tag_;
  const std::atomic<int>& posted_;
  int sent_ = 0;
};

// The dying rank's Comm: counts its receives on `tag` in `posted`, and dies (throws Died) when
// asked to post receive number `last` (1-based), having sent all it had to.
class DyingComm : public Comm {
 public:
  struct Died {};
  DyingComm(std::shared_ptr<Comm> inner, int tag, int last, std::atomic<int>& posted)
      : inner_(std::move(inner)), tag_(tag), last_(last), posted_(posted) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void barrier(Seconds timeout) override { inner_->barrier(timeout); }
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    return inner_->isend(buf, bytes, peer, tag);
  }
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    if (tag == tag_ && posted_.load() + 1 == last_) throw Died{};
    auto r = inner_->irecv(buf, bytes, peer, tag);
    if (tag == tag_) ++posted_;
    return r;
  }

 private:
  std::shared_ptr<Comm> inner_;
  const int tag_, last_;
  std::atomic<int>& posted_;
};

// Rank 2 of 3 dies in the last step, before it posts its last receive, having sent everything it
// had to (window 1: it posts a receive only once it forwarded the one before). Rank 0 has all it
// needs and ends; rank 1 has all its receives, but its last send, to rank 2, never completes. It
// waited on that send with Request::wait, whose error named neither the ring, nor the step, nor
// anyone but the peer: "rank 1: timeout after 1.0 s in send to rank 2 (tag 65536)". Now it is
// named as the other waits of the ring name theirs, with the census.
TEST(RingInProc, ASuccessorThatDiesInTheLastStepIsNamedWithTheStepAndTheCensus) {
  INPROC_ONLY();
  constexpr int kRanks = 3, kDead = 2;
  const std::size_t count = 64 * kRanks;
  RingOptions o;
  o.timeout = Seconds(1.0);  // 0.3 s: at load 18, 1 run in 5 had rank 1 time out on rank 0
  o.window = 1;
  const int receives = static_cast<int>(ring_receives(kDead, kRanks, count, 1 << 16).size());
  ASSERT_EQ(receives, 2 * kRanks - 2);  // one segment a chunk
  InProcWorld world(kRanks);
  std::atomic<int> posted{0};
  std::vector<std::shared_ptr<Comm>> comms = {
      world.comm(0), std::make_shared<RendezvousComm>(world.comm(1), kDead, o.tag, posted),
      std::make_shared<DyingComm>(world.comm(kDead), o.tag, receives, posted)};
  std::string errors[kRanks];
  long wrong[kRanks] = {-1, -1, -1};
  std::vector<std::thread> ts;
  for (int r = 0; r < kRanks; ++r)
    ts.emplace_back([&, r] {
      RingAllreduce ring(*comms[r], o);
      auto in = closed_form_input(r, count);
      std::vector<float> out(count, -1.0f);
      try {
        ring.run(in.data(), out.data(), count);
        wrong[r] = count_wrong(out.data(), count, kRanks, 1.0f);
      } catch (const DyingComm::Died&) {
        errors[r] = "died";
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(wrong[0], 0);
  EXPECT_EQ(errors[kDead], "died");
  const std::string& msg = errors[1];
  std::printf("rank 1 said: %s\n", msg.c_str());
  EXPECT_NE(msg.find("rank 1: timeout after 1.0 s in ring all-reduce step 3, send to rank 2 (tag " +
                     std::to_string(o.tag) + ") (the end of the run: send 4 of 4 not complete)"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(census_names_quiet(msg, kDead)) << msg;
}

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

}  // namespace
}  // namespace starring
