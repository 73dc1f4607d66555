// The engines other than the ring: nccl (runs on GPU ranks, refuses elsewhere) and the mpi
// engine's refusal of a non-MPI Comm. Linked before test_ring_mpi.cc
// (tests/allreduce/CMakeLists.txt) so that these run before its last cases, which abandon
// messages.
#include <memory>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "common/device.h"
#include "common/error.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/nccl_refusal.h"

namespace starring {
namespace {

using namespace starring::test;

TEST(MpiEngine, RejectsNonMpiComm) {
  INPROC_ONLY();
  inproc(2, [](std::shared_ptr<Comm> c) {
    EXPECT_THROW(make_mpi_allreducer(c, MpiMode::kBlocking, Seconds(1)), ConfigError);
  });
}

// nccl on device buffers: runs where a GPU per rank and NCCL exist, skips (saying why) elsewhere.
TEST(NcclEngine, ClosedFormOnDevice) {
  const int n = mpi_world_size();
  auto dev = make_device("auto", 1, test::mpi_world_rank());
  if (!dev->is_gpu()) GTEST_SKIP() << "no usable GPU";
  if (static_cast<int>(query_gpus().gpus.size()) < n) GTEST_SKIP() << "fewer GPUs than ranks";
  InProcWorld solo(1);
  std::shared_ptr<Comm> comm = n > 1 ? std::shared_ptr<Comm>(mpi_world()) : solo.comm(0);
  std::unique_ptr<Allreducer> eng;
  try {
    eng = make_nccl_allreducer(comm, dev.get(), false, Seconds(60));
  } catch (const ConfigError& e) {
    GTEST_SKIP() << e.what();
  }
  for (std::size_t count : test_counts(n)) {
    auto in = closed_form_input(comm->rank(), count);
    std::vector<float> out(count, -1.0f);
    float* d_in = dev->alloc(count + 1);
    float* d_out = dev->alloc(count + 1);
    dev->to_device(d_in, in.data(), count);
    for (float scale : {1.0f, 1.0f / n}) {
      eng->run(d_in, d_out, count, scale);
      dev->to_host(out.data(), d_out, count);
      EXPECT_EQ(count_wrong(out.data(), count, n, scale), 0) << "count " << count;
    }
    eng->run(d_in, d_in, count, 1.0f);  // in place
    dev->to_host(out.data(), d_in, count);
    EXPECT_EQ(count_wrong(out.data(), count, n, 1.0f), 0) << "in place, count " << count;
    dev->free(d_in);
    dev->free(d_out);
  }
}

TEST(NcclEngine, RefusesWithoutGpuDevice) {
  INPROC_ONLY();
  InProcWorld w(1);
  auto cpu = make_device("cpu", 1, 0);
  EXPECT_THROW(make_nccl_allreducer(w.comm(0), cpu.get(), false, Seconds(5)), ConfigError);
}

// Ranks without a GPU take part in the set-up's exchange instead of leaving at once, so every
// rank refuses with the same line naming the first such rank, whoever it is (on a GPU machine,
// tests/gpu mixes a GPU rank with a CPU one). A build without NCCL refuses by name on each rank.
TEST(NcclEngine, EveryRankRefusesWhenARankHasNoGpu) {
  INPROC_ONLY();
  const auto got = testing::try_nccl_on_inproc_ranks({"cpu", "cpu"}, Seconds(30));
  for (int r = 0; r < 2; ++r) {
    const std::string& msg = got[r].msg;
    EXPECT_TRUE(got[r].config_error) << msg;
    if (got[r].built_without_nccl()) continue;
    EXPECT_EQ(msg.rfind("rank " + std::to_string(r) + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find("backend 'nccl' needs a GPU on every rank, but rank 0"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("it computes on cpu"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace starring
