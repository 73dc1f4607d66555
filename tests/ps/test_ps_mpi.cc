// The parameter server over MPI (run as `mpirun -np 3` and `-np 4`): dedicated servers and
// co-located shards, bsp equal to the single-process reference bit for bit, and ssp's bound.
#include <gtest/gtest.h>
#include <mpi.h>

#include "common/mpi_comm.h"
#include "ps_test_util.h"

namespace starring::ps {
namespace {

using namespace starring::ps::testing;

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Runs this rank's role; returns the final parameters on workers (empty on servers) and the
// servers' statistics in `stats` (dedicated server: its own; worker: all, from the goodbyes).
std::vector<float> run_rank(const std::string& servers, const PsWorkerOptions& opt,
                            const OptimizerConfig& oc, int steps, nlohmann::json& stats,
                            const std::function<void(int, int)>& hook = {}) {
  auto comm = std::make_shared<MpiComm>(MPI_COMM_WORLD);
  comm->set_timeout(opt.timeout);
  const PsGroup group = make_ps_group(servers, comm->size());
  if (group.is_dedicated_server(comm->rank())) {
    ServerLoop loop(comm, group, server_options(opt));
    stats = nlohmann::json::array({loop.run()});
    return {};
  }
  const int w = group.worker_index(comm->rank());
  PsWorker ps(comm, group, opt);
  auto p = train_worker(ps, w, steps, oc, [&](int t) {
    if (hook) hook(w, t);
  });
  stats = ps.server_stats();
  return p;
}

void check_bsp(const std::string& servers, const std::string& opt_type) {
  const int steps = 4;
  const OptimizerConfig oc = test_opt(opt_type);
  nlohmann::json stats;
  auto p = run_rank(servers, test_options("bsp"), oc, steps, stats);
  const int workers = make_ps_group(servers, world_size()).num_workers();
  if (!p.empty()) {
    const auto ref = reference(test_layout(), workers, steps, oc);
    long wrong = 0;
    for (std::size_t i = 0; i < p.size(); ++i) wrong += p[i] != ref[i];
    EXPECT_EQ(wrong, 0) << "servers " << servers << ", " << opt_type;
  }
  for (const auto& s : stats) EXPECT_EQ(s["rounds"].get<int>(), steps) << s.dump();
}

TEST(PsMpi, BspOneServerEqualsReference) {
  if (world_size() < 2) GTEST_SKIP() << "needs mpirun";
  check_bsp("1", "sgd");
  check_bsp("1", "adamw");
}

TEST(PsMpi, BspTwoServersEqualsReference) {
  if (world_size() < 3) GTEST_SKIP() << "needs mpirun -np >= 3";
  check_bsp("2", "adamw");
}

TEST(PsMpi, BspColocatedEqualsReference) {
  if (world_size() < 2) GTEST_SKIP() << "needs mpirun";
  check_bsp("colocated", "sgd");
  check_bsp("colocated", "adamw");
}

TEST(PsMpi, SspKeepsTheBound) {
  if (world_size() < 3) GTEST_SKIP() << "needs mpirun -np >= 3";
  auto opt = test_options("ssp");
  opt.staleness = 1;
  nlohmann::json stats;
  run_rank("1", opt, test_opt("sgd"), 8, stats, [](int w, int) {
    if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  for (const auto& s : stats)
    for (const auto& [k, v] : s["staleness_hist"].items()) EXPECT_LE(std::stol(k), 1) << s.dump();
}

}  // namespace
}  // namespace starring::ps
