// The parameter server under the real trainer (in-process ranks), on edges the unit tests of
// ps/ do not reach:
//  - byte accounting: the per-step bytes a worker reports are the backend's pushes and pulls
//    only - not the trainer's own messages on the worker communicator (the start barrier, the
//    evaluation counts reduced to worker 0), so they do not change when evaluations are added.
#include <gtest/gtest.h>

#include "../trainer/train_fixture.h"
#include "ps/protocol.h"

namespace starring {
namespace {

Config ps_config(const std::string& servers) {
  Config cfg = testing::small_config();
  cfg.train.epochs = 3;
  cfg.sync.backend = "ps";
  cfg.sync.servers = servers;
  cfg.sync.consistency = "bsp";
  cfg.sync.ps_shared_memory = false;  // every byte in the messages, so the sums are exact
  return cfg;
}

int world_of(const Config& cfg, int workers) {
  return cfg.sync.servers == "colocated" ? workers : workers + std::stoi(cfg.sync.servers);
}

TEST(PsTrainerBytes, StepBytesAreThePushesAndPullsAloneWithOrWithoutEvaluation) {
  constexpr int kWorkers = 3;
  for (const char* servers : {"1", "colocated"}) {
    Config quiet = ps_config(servers);
    Config evals = quiet;
    evals.train.eval_each_epoch = true;
    const auto a = testing::train_inproc(quiet, world_of(quiet, kWorkers));
    const auto b = testing::train_inproc(evals, world_of(evals, kWorkers));
    for (int w = 0; w < kWorkers; ++w) {
      const TrainResult& ra = a[static_cast<std::size_t>(w)].result;
      const TrainResult& rb = b[static_cast<std::size_t>(w)].result;
      ASSERT_GT(ra.steps, 0);
      ASSERT_EQ(rb.history.size(), 3u);
      EXPECT_EQ(ra.bytes_sent, rb.bytes_sent) << servers << ", worker " << w;
      EXPECT_EQ(ra.bytes_recv, rb.bytes_recv) << servers << ", worker " << w;
      if (std::string(servers) != "1") continue;
      // One server, one bucket, one chunk: each step pushes the gradient with a header and
      // gets the parameters back.
      const std::uint64_t model = ra.num_params * sizeof(float);
      EXPECT_EQ(ra.bytes_sent, ra.steps * (model + sizeof(ps::PsHeader))) << "worker " << w;
      EXPECT_EQ(ra.bytes_recv, ra.steps * model) << "worker " << w;
    }
  }
}

}  // namespace
}  // namespace starring
