// Under mpirun: every backend that runs on all ranks as workers (ring, mpi, ps co-located) gives
// the parameters of one worker trained on the global batch (computed on each rank in-process).
// With an odd world size the ps backend also runs with one dedicated server (world-1 workers).
// Worker 0's metrics lines carry the mean of every worker's step loss (--metrics-loss all,
// trainer/step_losses.h): the reference's loss on the global batch, step by step, within 1e-5.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fstream>

#include "common/mpi_comm.h"
#include "tests/scratch_dir.h"
#include "train_fixture.h"

namespace starring {
namespace {

std::vector<float> run_on_world(Config cfg, std::string* role) {
  auto world = std::make_shared<MpiComm>(MPI_COMM_WORLD);
  auto data = load_data(cfg);
  auto dev = make_device("cpu", 1, world->rank());
  auto out = run_rank(cfg, world, *dev, nullptr, &data.first, &data.second);
  *role = out.role;
  return out.result.params;
}

std::vector<float> reference(int workers, const std::string& metrics) {
  Config cfg = testing::small_config();
  cfg.train.max_steps = 8;
  cfg.train.batch *= workers;
  cfg.out.metrics_file = metrics;
  return testing::train_inproc(cfg, 1)[0].result.params;
}

// The step lines' `key` values.
std::vector<double> step_values(const std::string& path, const char* key) {
  std::vector<double> out;
  std::ifstream f(path);
  for (std::string l; std::getline(f, l);) {
    const auto j = nlohmann::json::parse(l);
    if (!j.contains("event")) out.push_back(j.at(key).get<double>());
  }
  return out;
}

void expect_equivalent(const std::string& backend, const std::string& servers) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Config cfg = testing::small_config();
  cfg.train.max_steps = 8;
  cfg.sync.backend = backend;
  int workers = size;
  if (backend == "ps") {
    cfg.sync.servers = servers;
    cfg.sync.bucket_mb = 0.001;
    if (servers != "colocated") workers -= std::stoi(servers);
  }
  const std::string dir = testing::scratch_dir("equivalence_mpi_" + backend + servers);
  cfg.out.metrics_file = dir + "/m.jsonl";  // written by rank 0, worker 0
  std::string role;
  auto params = run_on_world(cfg, &role);
  if (role != "worker") return;
  EXPECT_LT(testing::max_abs_diff(params, reference(workers, dir + "/ref.jsonl")), 1e-6);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  const auto global = step_values(cfg.out.metrics_file, "global_loss");
  const auto ref = step_values(dir + "/ref.jsonl", "loss");
  ASSERT_EQ(global.size(), 8u);
  ASSERT_EQ(ref.size(), 8u);
  for (std::size_t s = 0; s < global.size(); ++s) EXPECT_NEAR(global[s], ref[s], 1e-5) << s + 1;
}

TEST(EquivalenceMpi, Ring) { expect_equivalent("ring", ""); }
TEST(EquivalenceMpi, MpiAllreduce) { expect_equivalent("mpi", ""); }
TEST(EquivalenceMpi, PsColocated) { expect_equivalent("ps", "colocated"); }
TEST(EquivalenceMpi, PsOneServer) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs a worker and a server";
  expect_equivalent("ps", "1");
}

}  // namespace
}  // namespace starring
