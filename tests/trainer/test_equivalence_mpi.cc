// Under mpirun: every backend that runs on all ranks as workers (ring, mpi, ps co-located) gives
// the parameters of one worker trained on the global batch (computed on each rank in-process).
// With an odd world size the ps backend also runs with one dedicated server (world-1 workers).
#include <gtest/gtest.h>
#include <mpi.h>

#include "common/mpi_comm.h"
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

std::vector<float> reference(int workers) {
  Config cfg = testing::small_config();
  cfg.train.max_steps = 8;
  cfg.train.batch *= workers;
  return testing::train_inproc(cfg, 1)[0].result.params;
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
  std::string role;
  auto params = run_on_world(cfg, &role);
  if (role == "worker") EXPECT_LT(testing::max_abs_diff(params, reference(workers)), 1e-6);
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
