// Under mpirun: stopping at a checkpoint and resuming in a fresh run changes no bit, on the
// backends that need MPI itself (mpi: MPI_Iallreduce; test_checkpoint_resume covers the others
// in-process) and on the parameter server across processes (its optimizer state, AdamW's moments,
// gathered from and restored to server ranks; with 3 ranks one dedicated server), with --accum 2,
// a warm-up and a cosine schedule, resumed inside an epoch.
#include <gtest/gtest.h>
#include <mpi.h>

#include "common/mpi_comm.h"
#include "tests/scratch_dir.h"
#include "train_fixture.h"
#include "trainer/checkpoint.h"

namespace starring {
namespace {

constexpr std::int64_t kSteps = 12, kEvery = 5;  // checkpoints at 5, 10 and 12

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// This rank's outcome; empty parameters on a dedicated server.
TrainResult run_on_world(const Config& cfg) {
  auto world = std::make_shared<MpiComm>(MPI_COMM_WORLD);
  auto data = load_data(cfg);
  auto dev = make_device("cpu", 1, world->rank());
  auto out = run_rank(cfg, world, *dev, nullptr, &data.first, &data.second);
  if (out.role != "worker") out.result.params.clear();
  return out.result;
}

void expect_resume_exact(const std::string& backend, const std::string& servers,
                         const std::string& opt) {
  Config cfg = testing::resumable_config(backend, servers);
  cfg.train.opt.type = opt;
  cfg.train.opt.weight_decay = 0.01f;
  if (opt == "adamw") cfg.train.lr = 0.01f;
  cfg.train.lr_scale = "linear";  // a warm-up that rises, through the checkpoint's step
  cfg.train.warmup_steps = 6;
  cfg.train.accum = 2;
  cfg.train.epochs = 100;  // --max-steps ends it, several epochs in
  cfg.train.max_steps = kSteps;
  if (backend == "ps") cfg.sync.bucket_mb = 0.001;
  // Rank 0 (worker 0) alone writes and reads checkpoints: its folder is the one that counts.
  const std::string dir = testing::scratch_dir("ckpt_mpi_" + backend + servers + opt);
  Config a = cfg;
  a.ckpt.dir = dir + "/a";
  a.ckpt.every = kEvery;
  a.ckpt.keep = 10;
  const std::vector<float> straight = run_on_world(a).params;
  Config b = cfg;
  b.ckpt.resume = a.ckpt.dir + "/" + checkpoint_file_name(kEvery);
  const TrainResult r = run_on_world(b);
  const std::vector<float> plain = run_on_world(cfg).params;
  if (straight.empty()) return;  // a dedicated server
  EXPECT_EQ(r.resumed_step, kEvery);
  EXPECT_EQ(r.steps, kSteps);
  const std::vector<float>& resumed = r.params;
  EXPECT_EQ(resumed, straight) << backend << " " << servers << " " << opt << ": max |diff| "
                               << testing::max_abs_diff(resumed, straight);
  EXPECT_NE(plain, std::vector<float>(plain.size(), 0.0f));
  EXPECT_EQ(plain, straight) << "writing checkpoints changed the training";
}

TEST(CheckpointMpi, MpiAllreduceSgd) { expect_resume_exact("mpi", "", "sgd"); }
TEST(CheckpointMpi, MpiAllreduceAdamw) { expect_resume_exact("mpi", "", "adamw"); }
TEST(CheckpointMpi, ParameterServerAdamw) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // 2 ranks: co-located; 3: 2 workers and 1 dedicated server
  expect_resume_exact("ps", world_size() == 3 ? "1" : "colocated", "adamw");
}

}  // namespace
}  // namespace starring
