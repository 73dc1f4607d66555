// The parameter server over MPI (run as `mpirun -np 3` and `-np 4`): dedicated servers and
// co-located shards, bsp equal to the single-process reference bit for bit, ssp's bound, and
// (np 3: 2 workers + 1 server) a silent worker and a silent server named by the other ranks;
// the data goes through shared segments (one host) or, switched off, in the messages.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <initializer_list>
#include <thread>

#include "common/mpi_comm.h"
#include "ps_test_util.h"
#include "tests/mpi_world.h"

namespace starring::ps {
namespace {

using namespace starring::ps::testing;
using ::starring::testing::world_size;

// Runs this rank's role; returns the final parameters on workers (empty on servers) and the
// servers' statistics in `stats` (dedicated server: its own; worker: all, from the goodbyes).
std::vector<float> run_rank(const std::string& servers, const PsWorkerOptions& opt,
                            const OptimizerConfig& oc, int steps, nlohmann::json& stats,
                            const std::function<void(int, int)>& hook = {}) {
  auto comm = std::make_shared<MpiComm>(MPI_COMM_WORLD);
  // Kept alive (never freed) so that MPI cannot reuse its context for a later test: a failed
  // run leaves best-effort abort messages unreceived, which must not reach the next test.
  static auto* keep = new std::vector<std::shared_ptr<MpiComm>>();
  keep->push_back(comm);
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

void check_bsp(const std::string& servers, const std::string& opt_type, bool shm = true) {
  const int steps = 4;
  const OptimizerConfig oc = test_opt(opt_type);
  nlohmann::json stats;
  auto opt = test_options("bsp");
  opt.shared_memory = shm;
  auto p = run_rank(servers, opt, oc, steps, stats);
  const int workers = make_ps_group(servers, world_size()).num_workers();
  if (!p.empty()) {
    const auto ref = reference(test_layout(), workers, steps, oc);
    long wrong = 0;
    for (std::size_t i = 0; i < p.size(); ++i) wrong += p[i] != ref[i];
    EXPECT_EQ(wrong, 0) << "servers " << servers << ", " << opt_type;
  }
  for (const auto& s : stats) {
    EXPECT_EQ(s["rounds"].get<int>(), steps) << s.dump();
    expect_data_path(s, shm);  // the ranks share a host: shared segments unless switched off
  }
}

TEST(PsMpi, BspOneServerEqualsReference) {
  if (world_size() < 2) GTEST_SKIP() << "needs mpirun";
  check_bsp("1", "sgd");
  check_bsp("1", "adamw");
  check_bsp("1", "adamw", false);
}

TEST(PsMpi, BspTwoServersEqualsReference) {
  if (world_size() < 3) GTEST_SKIP() << "needs mpirun -np >= 3";
  check_bsp("2", "adamw");
  // In messages: a push that arrives before its turn keeps its receive buffer until its round is
  // summed while the next receive goes to a spare one; a buffer reused too early shows here.
  check_bsp("2", "adamw", false);
}

TEST(PsMpi, BspColocatedEqualsReference) {
  if (world_size() < 2) GTEST_SKIP() << "needs mpirun";
  check_bsp("colocated", "sgd");
  check_bsp("colocated", "adamw");
  check_bsp("colocated", "adamw", false);
}

TEST(PsMpi, SspKeepsTheBound) {
  if (world_size() < 3) GTEST_SKIP() << "needs mpirun -np >= 3";
  auto opt = test_options("ssp");
  opt.staleness = 1;
  nlohmann::json stats;
  run_rank("1", opt, test_opt("sgd"), 8, stats, [](int w, int) {
    if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  for (const auto& s : stats) {
    for (const auto& [k, v] : s["staleness_hist"].items()) EXPECT_LE(std::stol(k), 1) << s.dump();
    // Pushes through the workers' segments; replies carry their values (they change at every
    // push under ssp, so they cannot be read from the server's segment later).
    EXPECT_EQ(s["shm_push_bytes"], s["push_bytes_in"]) << s.dump();
    EXPECT_EQ(s["shm_reply_bytes"].get<std::uint64_t>(), 0u) << s.dump();
    EXPECT_GT(s["reply_bytes_out"].get<std::uint64_t>(), 0u) << s.dump();
  }
}

// Runs one rank of a 2-worker + 1-server job with timeout 1 s and returns its error text.
std::string faulty_rank(const std::string& fault, const std::function<void(int, int)>& hook) {
  auto opt = test_options("bsp");
  opt.timeout = Seconds(1.0);
  opt.fault = fault;
  nlohmann::json stats;
  try {
    run_rank("1", opt, test_opt("sgd"), 6, stats, hook);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Waits (at most `cap`) for a one-int note from each of `from` on MPI_COMM_WORLD, of which the
// parameter server's communicator is a copy (MpiComm duplicates it): the notes cannot meet its
// messages. It polls every 20 ms: polling every 1 ms, the silent worker's trainer thread ran for
// about 1 % of the wall time, which its PsWorker took for a sign of life (common/thread_pulse.h),
// and it was waited for (1 of 2 runs once bsp heartbeats for a live trainer).
constexpr int kEndedTag = 4242;
bool notes_from(std::initializer_list<int> from, std::chrono::seconds cap) {
  const auto deadline = std::chrono::steady_clock::now() + cap;
  for (int r : from) {
    int note = 0, done = 0;
    MPI_Request req;
    MPI_Irecv(&note, 1, MPI_INT, r, kEndedTag, MPI_COMM_WORLD, &req);
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!done) {
      MPI_Cancel(&req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      return false;
    }
  }
  return true;
}

// Worker 1 is silent until ranks 0 and 2 have ended (each tells it so), not for a fixed time a
// loaded machine could outlast: they must time out to end. Were their timeouts never to fire,
// it would come back after 30 s and they would end without an error.
TEST(PsMpi, SilentWorkerIsNamedByTheOthers) {
  if (world_size() != 3) GTEST_SKIP() << "runs under mpirun -np 3";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string err = faulty_rank("", [](int w, int t) {
    if (w == 1 && t == 3)
      EXPECT_TRUE(notes_from({0, 2}, std::chrono::seconds(30))) << "the others never ended";
  });
  if (rank != 1) {
    EXPECT_NE(err.find("worker rank 1"), std::string::npos) << err;
    const int ended = 1;
    MPI_Send(&ended, 1, MPI_INT, 1, kEndedTag, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PsMpi, SilentServerIsNamedByTheWorkers) {
  if (world_size() != 3) GTEST_SKIP() << "runs under mpirun -np 3";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string err = faulty_rank("hang:2:3", {});
  if (rank != 2) EXPECT_NE(err.find("server rank 2"), std::string::npos) << err;
  if (rank == 2) EXPECT_NE(err.find("--fault"), std::string::npos) << err;
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace starring::ps
