// Which GPU each rank computes on and the one-GPU-per-rank check of the nccl backend
// (common/gpu_assignment.h), on layouts of real clusters described as data: no GPU needed. Also
// ScopedEnv (common/scoped_env.h), which the nccl engine uses for NCCL_ALGO, and the probe's
// answer on a machine without a usable GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/gpu_assignment.h"
#include "common/scoped_env.h"

namespace starring {
namespace {

// What every rank of a job would report: `hosts` hosts with `ranks_per_host` ranks each (ranks
// numbered host by host, as --map-by slot places them), every process seeing `visible` GPUs.
// per_rank_visible: the launcher gives each rank one GPU of its own (CUDA_VISIBLE_DEVICES per
// rank, Slurm's --gpus-per-task=1): every process sees one GPU, its cuda:0, a different one.
std::vector<GpuSlot> job(int hosts, int ranks_per_host, int visible,
                         bool per_rank_visible = false) {
  std::vector<GpuSlot> slots;
  for (int h = 0; h < hosts; ++h)
    for (int local = 0; local < ranks_per_host; ++local) {
      GpuSlot s;
      s.host = "node" + std::to_string(h);
      s.visible = per_rank_visible ? 1 : visible;
      s.ordinal = gpu_for_local_rank(local, s.visible);
      const int physical = per_rank_visible ? local % visible : s.ordinal;
      s.pci = "00000000:" + std::to_string(0x18 + physical) + ":00.0";  // the same on every node
      s.uuid = "GPU-" + std::to_string(h) + "-" + std::to_string(physical);
      slots.push_back(s);
    }
  return slots;
}

TEST(GpuForLocalRank, RoundRobinOverTheVisibleGpus) {
  for (int r = 0; r < 8; ++r) EXPECT_EQ(gpu_for_local_rank(r, 8), r);
  EXPECT_EQ(gpu_for_local_rank(8, 8), 0);
  EXPECT_EQ(gpu_for_local_rank(13, 8), 5);
  EXPECT_EQ(gpu_for_local_rank(5, 1), 0);  // one visible GPU: every rank's cuda:0
  EXPECT_THROW(gpu_for_local_rank(0, 0), Error);
  EXPECT_THROW(gpu_for_local_rank(-1, 8), Error);
}

TEST(OneGpuPerRank, AcceptsOneRankPerGpuOnEveryNode) {
  EXPECT_EQ(one_gpu_per_rank_problem(job(1, 8, 8), "nccl"), "");
  EXPECT_EQ(one_gpu_per_rank_problem(job(4, 8, 8), "nccl"), "");  // same PCI ids on every node
  EXPECT_EQ(one_gpu_per_rank_problem(job(2, 4, 8), "nccl"), "");  // fewer ranks than GPUs
  EXPECT_EQ(one_gpu_per_rank_problem(job(2, 8, 8, true), "nccl"), "");  // every ordinal is 0
  EXPECT_EQ(one_gpu_per_rank_problem({}, "nccl"), "");
}

TEST(OneGpuPerRank, RefusesMoreRanksThanGpusOnANode) {
  // 16 ranks on one 8-GPU node: local rank 8 gets cuda:0 again, next to rank 0.
  const std::string p = one_gpu_per_rank_problem(job(1, 16, 8), "backend 'nccl'");
  EXPECT_NE(p.find("backend 'nccl' needs one GPU per rank"), std::string::npos) << p;
  EXPECT_NE(p.find("ranks 0 and 8 both use cuda:0 on host node0"), std::string::npos) << p;
  EXPECT_NE(p.find("16 ranks there, 8 GPUs visible"), std::string::npos) << p;
  // Two nodes, the second one over-full: ranks are numbered from the job, not the node.
  std::vector<GpuSlot> slots = job(1, 2, 2);
  for (GpuSlot s : job(1, 3, 2)) {
    s.host = "node1";
    slots.push_back(s);
  }
  const std::string q = one_gpu_per_rank_problem(slots, "nccl");
  EXPECT_NE(q.find("ranks 2 and 4 both use cuda:0 on host node1"), std::string::npos) << q;
  EXPECT_NE(q.find("3 ranks there, 2 GPUs visible"), std::string::npos) << q;
  // A launcher that gave two ranks the same GPU through CUDA_VISIBLE_DEVICES.
  std::vector<GpuSlot> same = job(1, 2, 2, true);
  same[1].pci = same[0].pci;
  same[1].uuid = same[0].uuid;
  EXPECT_NE(one_gpu_per_rank_problem(same, "nccl").find("ranks 0 and 1"), std::string::npos);
}

TEST(OneGpuPerRank, TellsGpusApartByPciWhenUuidsAreZero) {
  std::vector<GpuSlot> slots = job(1, 4, 4);
  for (GpuSlot& s : slots) s.uuid = "GPU-00000000-0000-0000-0000-000000000000";  // some VMs
  EXPECT_EQ(one_gpu_per_rank_problem(slots, "nccl"), "");
  slots[3].pci = slots[1].pci;
  EXPECT_NE(one_gpu_per_rank_problem(slots, "nccl").find("ranks 1 and 3"), std::string::npos);
}

TEST(OneGpuPerRank, NamesTheFirstRankWithoutAGpu) {
  std::vector<GpuSlot> slots = job(2, 2, 2);
  slots[3] = GpuSlot{};
  slots[3].host = "node1";
  slots[3].note = "it computes on cpu";
  slots[2].ordinal = -1;  // wins: the first such rank
  slots[2].note = "no CUDA device found";
  const std::string p = one_gpu_per_rank_problem(slots, "backend 'nccl'");
  EXPECT_NE(p.find("needs a GPU on every rank, but rank 2 (host node1) has none (no CUDA device "
                   "found): run it with --device cuda"),
            std::string::npos)
      << p;
}

TEST(GpuPlanLines, OneLinePerHostWithEachRanksGpu) {
  std::vector<GpuSlot> slots = job(2, 3, 2);
  slots[5] = GpuSlot{};
  slots[5].host = "node1";
  slots[5].note = "no CUDA device found";
  const auto lines = gpu_plan_lines(slots);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "node0: ranks 0->cuda:0 1->cuda:1 2->cuda:0 (3 ranks on 2 GPUs; a rank sees 2)");
  EXPECT_EQ(
      lines[1],
      "node1: ranks 3->cuda:0 4->cuda:1 5->cpu (2 GPUs; a rank sees 2) [no CUDA device found]");
  // train keeps dedicated ps servers on the CPU whatever --device says: the plan says so (env
  // is not given --backend or --servers), for a job that can have a server
  EXPECT_EQ(lines[2], "--backend ps --servers S: the last S ranks are servers, on the CPU");
  EXPECT_EQ(gpu_plan_lines(job(1, 1, 1)),
            std::vector<std::string>{"node0: ranks 0->cuda:0 (1 GPU; a rank sees 1)"});
  // Every rank given its own GPU by the launcher: each sees one, all are cuda:0, none shared.
  EXPECT_EQ(gpu_plan_lines(job(1, 2, 2, true))[0],
            "node0: ranks 0->cuda:0 1->cuda:0 (2 GPUs; a rank sees 1)");
  std::vector<GpuSlot> none(2);
  for (GpuSlot& s : none) {
    s.host = "login";
    s.note = "built without CUDA";
  }
  EXPECT_EQ(gpu_plan_lines(none)[0], "login: ranks 0->cpu 1->cpu [built without CUDA]");
}

// On a machine without a usable GPU (CI, this one) the probe says why; with one, it names it.
TEST(ProbeGpuSlot, NamesTheGpuOrSaysWhyThereIsNone) {
  const GpuSlot s = probe_gpu_slot(3);
  EXPECT_EQ(s.host, this_host_name());
  if (s.has_gpu()) {
    EXPECT_EQ(s.ordinal, 3 % s.visible);
    EXPECT_EQ(s.uuid.rfind("GPU-", 0), 0u) << s.uuid;
    EXPECT_FALSE(s.pci.empty());
  } else {
    EXPECT_FALSE(s.note.empty());
  }
}

TEST(ScopedEnv, SetsForTheScopeAndPutsBackWhatWasThere) {
  const char* name = "STARRING_TEST_SCOPED_ENV";
  unsetenv(name);
  {
    ScopedEnv e(name, "Ring");
    ASSERT_NE(std::getenv(name), nullptr);
    EXPECT_STREQ(std::getenv(name), "Ring");
  }
  EXPECT_EQ(std::getenv(name), nullptr);  // was unset: unset again
  setenv(name, "Tree", 1);
  {
    ScopedEnv e(name, "Ring");
    EXPECT_STREQ(std::getenv(name), "Ring");
  }
  EXPECT_STREQ(std::getenv(name), "Tree");  // the user's value is back
  unsetenv(name);
}

}  // namespace
}  // namespace starring
