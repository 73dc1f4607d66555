// The nccl engine on one GPU: the closed-form all-reduce (tests/allreduce's data: exact sums) at
// every rank count the machine has GPUs for (plain run: 1 rank; under mpirun: one GPU per rank),
// NCCL_ALGO=Ring forcing (and putting it back), a run from a thread with another current GPU,
// and two ranks on one GPU, or a rank without one, refused with a ConfigError on both ranks
// (in-process ranks, so no mpirun is needed) instead of NCCL's hang or opaque failure.
// Skipped without a usable GPU or without NCCL in the build.
#include <cstdlib>
#include <thread>
#include <vector>

#include "allreduce/allreducer.h"
#include "common/error.h"
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
