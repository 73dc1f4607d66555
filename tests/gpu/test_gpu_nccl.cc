// The nccl engine on one GPU: the closed-form all-reduce (tests/allreduce's data: exact sums) at
// every rank count the machine has GPUs for (plain run: 1 rank; under mpirun: one GPU per rank),
// NCCL_ALGO=Ring forcing (and putting it back), a run from a thread with another current GPU,
// a live straggler's first all-reduce waited for past the timeout (two GPUs), and two ranks on
// one GPU, or a rank without one, refused with a ConfigError on both ranks (in-process ranks, so
// no mpirun is needed) instead of NCCL's hang or opaque failure.
// Skipped without a usable GPU or without NCCL in the build.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "allreduce/allreducer.h"
#include "common/error.h"
#include "common/peer_liveness.h"
#include "common/scoped_env.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/nccl_refusal.h"

namespace starring {
namespace {

using gpu_test::Buf;

// The engine on `comm`, or a skip reason when this build has no NCCL.
std::unique_ptr<Allreducer> nccl_or_null(std::shared_ptr<Comm> comm, Device* dev, bool ring,
                                         std::string* why) {
  try {
    return make_nccl_allreducer(std::move(comm), dev, ring, Seconds(60));
  } catch (const ConfigError& e) {
    if (std::string(e.what()).find("built without NCCL") == std::string::npos) throw;
    *why = e.what();
    return nullptr;
  }
}

void check_closed_form(Allreducer& eng, Device& dev, const Comm& comm) {
  const int n = comm.size();
  for (std::size_t count : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000003),
                            (std::size_t(1) << 26) + 3}) {
    auto in = test::closed_form_input(comm.rank(), count);
    Buf In(dev, in), Out(dev, count + 1);
    for (float scale : {1.0f, 1.0f / n}) {
      eng.run(In.p, Out.p, count, scale);
      auto out = Out.get(0, count);
      EXPECT_EQ(test::count_wrong(out.data(), count, n, scale), 0)
          << "count " << count << " scale " << scale;
    }
    eng.run(In.p, In.p, count, 1.0f);  // in place
    auto out = In.get(0, count);
    EXPECT_EQ(test::count_wrong(out.data(), count, n, 1.0f), 0) << "in place, count " << count;
  }
}

// Plain run: one in-process rank. Under mpirun -np N (N GPUs on the node): the MPI world.
TEST(GpuNccl, ClosedFormAllreduce) {
  const int n = test::mpi_world_size();
  std::string why;
  auto dev = gpu_test::cuda_or_null(&why, test::mpi_world_rank());
  if (!dev) GTEST_SKIP() << why;
  if (static_cast<int>(query_gpus().gpus.size()) < n) GTEST_SKIP() << "fewer GPUs than ranks";
  InProcWorld solo(1);
  std::shared_ptr<Comm> comm = n > 1 ? std::shared_ptr<Comm>(test::mpi_world()) : solo.comm(0);
  auto eng = nccl_or_null(comm, dev.get(), false, &why);
  if (!eng) GTEST_SKIP() << why;
  EXPECT_EQ(eng->name(), "nccl");
  EXPECT_TRUE(eng->on_device());
  check_closed_form(*eng, *dev, *comm);
}

// --nccl-force-ring: NCCL_ALGO=Ring is in the environment while the communicator is created
// (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ENV shows NCCL reading it: device_check.sh's train_nccl), and
// once the engine is made the variable is what it was before -- unset, or the user's own value
// -- so later communicators of the process are not pinned to Ring. The all-reduce still sums
// exactly. (At one rank NCCL runs no ring.)
TEST(GpuNccl, ForceRingPutsNcclAlgoBackAfterInit) {
  INPROC_ONLY();
  std::string why;
  auto dev = gpu_test::cuda_or_null(&why);
  if (!dev) GTEST_SKIP() << why;
  const char* old = std::getenv("NCCL_ALGO");
  const std::string saved = old ? old : "";
  for (const char* before : {static_cast<const char*>(nullptr), "Tree"}) {
    if (before)
      setenv("NCCL_ALGO", before, 1);
    else
      unsetenv("NCCL_ALGO");
    InProcWorld solo(1);
    auto eng = nccl_or_null(solo.comm(0), dev.get(), true, &why);
    if (!eng) GTEST_SKIP() << why;
    const char* now = std::getenv("NCCL_ALGO");
    EXPECT_STREQ(now ? now : "(unset)", before ? before : "(unset)");
    check_closed_form(*eng, *dev, *solo.comm(0));
  }
  if (old)
    setenv("NCCL_ALGO", saved.c_str(), 1);
  else
    unsetenv("NCCL_ALGO");
}

// BucketSync's communication thread calls run() on a thread that never chose a GPU (CUDA's
// current device there is 0): the all-reduce must still sum exactly. With two GPUs the engine is
// on cuda:1 while the thread's default is cuda:0 (the case of every rank but the first on a node).
TEST(GpuNccl, RunsFromAThreadWithAnotherCurrentGpu) {
  INPROC_ONLY();
  std::string why;
  const int gpus = static_cast<int>(query_gpus().gpus.size());
  auto dev = gpu_test::cuda_or_null(&why, gpus > 1 ? 1 : 0);
  if (!dev) GTEST_SKIP() << why;
  InProcWorld solo(1);
  auto eng = nccl_or_null(solo.comm(0), dev.get(), false, &why);
  if (!eng) GTEST_SKIP() << why;
  auto in = test::closed_form_input(0, 1000003);
  Buf In(*dev, in), Out(*dev, in.size());
  std::thread([&] { eng->run(In.p, Out.p, in.size(), 1.0f); }).join();
  auto out = Out.get();
  EXPECT_EQ(test::count_wrong(out.data(), in.size(), 1, 1.0f), 0);
}

// Vouches for the peers (a straggler's trainer computing) until `until`; counts the asks.
class AliveUntil : public PeerLiveness {
 public:
  explicit AliveUntil(std::chrono::steady_clock::time_point until) : until_(until) {}
  bool peers_alive(std::string* why) override {
    ++asks;
    if (std::chrono::steady_clock::now() < until_) return true;
    *why = "the test's liveness gave up";
    return false;
  }
  std::atomic<int> asks{0};

 private:
  std::chrono::steady_clock::time_point until_;
};

// A live straggler whose first all-reduce comes later than the timeout: NCCL (2.22 on, lazy
// connection, NCCL_RUNTIME_CONNECT=1) connects the ranks inside that first call, so the punctual
// rank waits for the call to be ready, before any stream wait. Both waits must ask the PeerWatch
// (here a liveness that vouches for the peer) past the timeout instead of failing; the readiness
// wait asked nothing before (read from NCCL's code, not seen: the punctual rank would fail with
// 'timeout after 1.0 s waiting for ncclAllReduce'). Two in-process ranks on two GPUs (skipped
// with fewer). The set-up is not bounded by the 1 s: ncclCommInitRank waits at least 120 s.
TEST(GpuNccl, FirstAllreduceWaitsForALiveStragglerPastTheTimeout) {
  INPROC_ONLY();
  std::string why;
  if (!gpu_test::cuda_or_null(&why)) GTEST_SKIP() << why;
  if (query_gpus().gpus.size() < 2) GTEST_SKIP() << "needs 2 GPUs (one per rank)";
  ScopedEnv lazy("NCCL_RUNTIME_CONNECT", "1");  // NCCL's default since 2.22; ignored before
  const std::size_t count = 1000003;
  InProcWorld w(2);
  AliveUntil alive(std::chrono::steady_clock::now() + std::chrono::seconds(20));
  std::string err[2];
  long wrong[2] = {-1, -1};
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      try {
        std::string no;
        auto dev = gpu_test::cuda_or_null(&no, r);
        if (!dev) throw Error("no GPU " + std::to_string(r) + ": " + no);
        w.comm(r)->barrier(Seconds(60));  // both GPUs' contexts made: the engines meet at once
        auto eng = make_nccl_allreducer(w.comm(r), dev.get(), false, Seconds(1.0));
        eng->watch_peers(&alive);
        auto in = test::closed_form_input(r, count);
        Buf In(*dev, in), Out(*dev, count);
        if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // straggler
        eng->run(In.p, Out.p, count, 1.0f);
        auto out = Out.get();
        wrong[r] = test::count_wrong(out.data(), count, 2, 1.0f);
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  if (err[0].find("built without NCCL") != std::string::npos) GTEST_SKIP() << err[0];
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(err[r], "") << "rank " << r;
    EXPECT_EQ(wrong[r], 0) << "rank " << r;
  }
  EXPECT_GT(alive.asks.load(), 0) << "the punctual rank never waited past the timeout";
}

// A rank whose Device is the CPU (--device cpu, or a GPU it could not use) next to a GPU rank:
// both refuse at once with the line naming the CPU rank, instead of the GPU rank waiting out
// the timeout for a peer that already left.
TEST(GpuNccl, ARankWithoutGpuIsRefusedOnEveryRank) {
  INPROC_ONLY();
  std::string why;
  auto probe = gpu_test::cuda_or_null(&why);
  if (!probe) GTEST_SKIP() << why;
  probe.reset();
  const auto got = testing::try_nccl_on_inproc_ranks({"cuda", "cpu"}, Seconds(20));
  if (got[0].built_without_nccl()) GTEST_SKIP() << got[0].msg;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(got[r].config_error) << "rank " << r << ": " << got[r].msg;
    EXPECT_NE(got[r].msg.find("needs a GPU on every rank, but rank 1"), std::string::npos)
        << got[r].msg;
  }
}

// Two ranks on one GPU: every rank gets the same ConfigError naming both ranks, in well under the
// timeout (rank 0 checks the GPUs before any NCCL call).
TEST(GpuNccl, TwoRanksOnOneGpuAreRefusedOnEveryRank) {
  INPROC_ONLY();
  std::string why;
  auto probe = gpu_test::cuda_or_null(&why);
  if (!probe) GTEST_SKIP() << why;
  const auto got = testing::try_nccl_on_inproc_ranks({"cuda", "cuda"}, Seconds(20));  // GPU 0
  if (got[0].built_without_nccl()) GTEST_SKIP() << got[0].msg;
  for (int r = 0; r < 2; ++r) {
    const std::string& msg = got[r].msg;
    EXPECT_TRUE(got[r].config_error) << "rank " << r << ": " << msg;
    EXPECT_NE(msg.find("needs one GPU per rank"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ranks 0 and 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(r) + ":"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace starring
