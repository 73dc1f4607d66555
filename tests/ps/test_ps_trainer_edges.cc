// The parameter server under the real trainer (in-process ranks), on edges the unit tests of
// ps/ do not reach:
//  - byte accounting: the per-step bytes a worker reports are the backend's pushes and pulls
//    only - not the trainer's own messages on the worker communicator (the start barrier, the
//    evaluation counts reduced to worker 0, the parameters fetched for an evaluation under
//    asp), so they do not change when evaluations are added; nor when checkpoints are (a
//    co-located worker booked the others' next pushes that reached its shard before it took its
//    checkpoint's figures as checkpoint traffic: up to 10 KB of a run's step bytes here); nor
//    when a worker waited long enough to send heartbeats;
//  - more servers than the model has floats: every worker fails at start with the ConfigError
//    that says so, and the dedicated servers stop at once with it (they used to take the
//    workers' clean-up for a finished run, and the workers then waited for goodbyes that no
//    thread could receive; under mpirun the job ended in timeouts that hid the real message);
//  - asp / ssp: every evaluation, the last one included, sees the servers' parameters with every
//    push applied, on every worker - not each worker's own last reply (which under asp lags the
//    others' later pushes), so the reported accuracy is that of one model, the final one;
//  - a worker that cannot set up training (its metrics file, a checkpoint that does not fit the
//    data): every rank stops at once with its message, the dedicated server told by the worker;
//  - asp, a dedicated server that stops while worker 1 waits at an evaluation barrier for worker
//    0, which waits for a reply: worker 1's barrier times out first and named worker 0 (a timeout
//    in the barrier's recv from rank 0); it now checks the server and names it;
//  - a large --ps-chunk-bytes on a small model: a server's receive buffers are as large as the
//    chunk, and zero-filled they cost 4 chunks of memory per server (1G: 4 GiB a server, 7 s to
//    start; co-located on 5 ranks, more than this machine's memory).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "../trainer/train_fixture.h"
#include "common/sub_comm.h"
#include "ps/protocol.h"
#include "ps/server_loop.h"
#include "ps_test_util.h"
#include "tests/ps/forwarding_comm.h"
#include "tests/ps/park_gate.h"
#include "tests/scratch_dir.h"
#include "trainer/trainer.h"

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
  for (const char* consistency : {"bsp", "asp"}) {
    for (const char* servers : {"1", "colocated"}) {
      Config quiet = ps_config(servers);
      quiet.sync.consistency = consistency;
      Config evals = quiet;
      evals.train.eval_each_epoch = true;
      const auto a = testing::train_inproc(quiet, world_of(quiet, kWorkers));
      const auto b = testing::train_inproc(evals, world_of(evals, kWorkers));
      for (int w = 0; w < kWorkers; ++w) {
        const TrainResult& ra = a[static_cast<std::size_t>(w)].result;
        const TrainResult& rb = b[static_cast<std::size_t>(w)].result;
        ASSERT_GT(ra.steps, 0);
        ASSERT_EQ(rb.history.size(), 3u);
        EXPECT_EQ(ra.bytes_sent, rb.bytes_sent)
            << consistency << ", " << servers << ", worker " << w;
        EXPECT_EQ(ra.bytes_recv, rb.bytes_recv)
            << consistency << ", " << servers << ", worker " << w;
        if (std::string(servers) != "1") continue;
        // One server, one bucket, one chunk: each step pushes the gradient with a header and
        // gets the parameters back.
        const std::uint64_t model = ra.num_params * sizeof(float);
        EXPECT_EQ(ra.bytes_sent, ra.steps * (model + sizeof(ps::PsHeader))) << "worker " << w;
        EXPECT_EQ(ra.bytes_recv, ra.steps * model) << "worker " << w;
      }
    }
  }
}

TEST(PsTrainerBytes, CheckpointsLeaveTheStepBytesAlone) {
  constexpr int kWorkers = 3;
  for (const char* servers : {"colocated", "1"}) {
    const Config plain = ps_config(servers);
    Config ckpt = plain;
    ckpt.ckpt.dir = testing::scratch_dir(std::string("ps_edges_ckpt_") + servers);
    ckpt.ckpt.every = 3;
    ckpt.ckpt.keep = 1;
    const auto a = testing::train_inproc(plain, world_of(plain, kWorkers));
    const auto b = testing::train_inproc(ckpt, world_of(ckpt, kWorkers));
    for (int w = 0; w < kWorkers; ++w) {
      const TrainResult& ra = a[static_cast<std::size_t>(w)].result;
      const TrainResult& rb = b[static_cast<std::size_t>(w)].result;
      EXPECT_EQ(ra.bytes_sent, rb.bytes_sent) << servers << ", worker " << w;
      EXPECT_EQ(ra.bytes_recv, rb.bytes_recv)
          << servers << ", worker " << w << " (checkpoint bytes " << rb.checkpoint_bytes_recv
          << ")";
      if (w != 0) continue;
      // Each checkpoint fetches the shards' parameters and momentum: at least the model's bytes,
      // co-located too (worker 0's own shard stays home), and the sum is over every checkpoint
      // (the last one's alone passed every test: helper-112's mutation test).
      ASSERT_GE(rb.checkpoints, 2);
      EXPECT_GE(rb.checkpoint_bytes_recv,
                static_cast<std::uint64_t>(rb.checkpoints) * rb.num_params * sizeof(float))
          << servers;
    }
  }
}

// A worker that waits for its replies longer than --timeout / 4 sends every server a heartbeat
// (32 bytes); those went into its step bytes (the servers' figures left them out), so a
// worker's bytes per step depended on how long it had waited: 2712 -> 2716.3 under random
// pauses (ssp, 3 workers, 2 servers), against the pushes' and pulls' exact sum.
TEST(PsTrainerBytes, HeartbeatsLeaveTheStepBytesAlone) {
  constexpr int kWorkers = 2;
  for (const char* servers : {"1", "colocated"}) {
    Config plain = ps_config(servers);
    plain.train.max_steps = 4;
    plain.sync.timeout_s = 1;  // a heartbeat after 0.25 s of waiting
    Config slow = plain;
    slow.train.straggler = "1:400";  // worker 0 waits 0.4 s a step for worker 1's push
    const auto a = testing::train_inproc(plain, world_of(plain, kWorkers));
    const auto b = testing::train_inproc(slow, world_of(slow, kWorkers));
    // a server's control bytes: set-up, done and every heartbeat it received (co-located: the
    // shard of worker 1, to which worker 0's heartbeats go)
    const bool dedicated = std::string(servers) == "1";
    auto control = [&](const std::vector<RankOutcome>& outs) {
      const nlohmann::json& s = outs[dedicated ? kWorkers : 1].backend_stats;
      return (dedicated ? s : s.value("shard", nlohmann::json::object()))
          .value("setup_bytes_recv", 0.0);
    };
    EXPECT_GT(control(b), control(a)) << servers << ": no heartbeat was sent";
    for (int w = 0; w < kWorkers; ++w) {
      const TrainResult& ra = a[static_cast<std::size_t>(w)].result;
      const TrainResult& rb = b[static_cast<std::size_t>(w)].result;
      ASSERT_EQ(rb.steps, 4);
      EXPECT_EQ(ra.bytes_sent, rb.bytes_sent) << servers << ", worker " << w;
      EXPECT_EQ(ra.bytes_recv, rb.bytes_recv) << servers << ", worker " << w;
    }
  }
}

TEST(PsTrainerAsync, EveryWorkerEvaluatesAndEndsWithTheServersParameters) {
  constexpr int kWorkers = 3;
  for (const char* consistency : {"asp", "ssp"}) {
    for (const char* servers : {"1", "colocated"}) {
      Config cfg = ps_config(servers);
      cfg.sync.consistency = consistency;
      cfg.sync.staleness = 1;
      cfg.sync.ps_shared_memory = true;
      cfg.train.eval_each_epoch = true;
      const auto outs = testing::train_inproc(cfg, world_of(cfg, kWorkers));
      const TrainResult& r0 = outs[0].result;
      for (int w = 1; w < kWorkers; ++w) {
        const TrainResult& r = outs[static_cast<std::size_t>(w)].result;
        EXPECT_EQ(r.params, r0.params)
            << consistency << ", servers " << servers << ": worker " << w << " ended with other "
            << "parameters than worker 0 (max |diff| " << testing::max_abs_diff(r.params, r0.params)
            << ")";
      }
    }
  }
}

// The process's peak resident memory in MiB (ru_maxrss is in KiB on Linux).
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

TEST(PsStart, LargeChunksOnASmallModelCostNoMemoryUpFront) {
  Config cfg = ps_config("colocated");  // a server in each of the 2 workers, and one dedicated
  cfg.train.epochs = 1;
  cfg.sync.ps_chunk_bytes = std::size_t{128} << 20;  // the model is 3 KB
  const double before = peak_rss_mib();
  const auto colocated = testing::train_inproc(cfg, 2);
  cfg.sync.servers = "1";
  const auto dedicated = testing::train_inproc(cfg, 3);
  EXPECT_GT(colocated[0].result.steps, 0);
  EXPECT_GT(dedicated[0].result.steps, 0);
  // Zero-filled, 3 servers x 4 receive slots x 128 MiB = 1.5 GiB. (Under ASan, freeing the
  // buffers writes 1/8 of their size of shadow memory: 192 MiB.)
  EXPECT_LT(peak_rss_mib() - before, 512.0) << "MiB of peak memory for a 3 KB model";
}

TEST(PsStart, MoreServersThanFloatsIsAConfigErrorOnEveryRank) {
  ParamLayout layout;  // 3 floats for 4 servers
  layout.add("fc.bias", {1});
  layout.add("fc.weight", {2});
  for (const char* servers : {"4", "colocated"}) {
    const int workers = std::string(servers) == "4" ? 2 : 4;
    const int n = std::string(servers) == "4" ? workers + 4 : workers;
    const ps::PsGroup group = ps::make_ps_group(servers, n);
    ps::PsWorkerOptions opt = ps::testing::test_options();
    opt.timeout = Seconds(1.0);  // a hang in the clean-up shows as a TimeoutError, not a wait
    const auto errors = ps::testing::run_world(n, [&](std::shared_ptr<Comm> comm) {
      if (group.is_dedicated_server(comm->rank())) {
        ps::ServerLoop(comm, group, ps::testing::server_options(opt)).run();
        return;
      }
      std::vector<float> p(layout.total()), g(layout.total());
      ps::PsWorker w(comm, group, opt);
      try {
        w.start(layout, {p.data(), g.data(), false, nullptr}, ps::testing::test_opt("sgd"));
      } catch (const ConfigError& e) {
        w.shutdown();  // as Trainer::run after a failure: must not wait for anything
        throw;
      }
    });
    for (int r = 0; r < n; ++r)
      EXPECT_NE(errors[static_cast<std::size_t>(r)].find("would own no part of the model"),
                std::string::npos)
          << servers << ", rank " << r << ": '" << errors[static_cast<std::size_t>(r)] << "'";
  }
}

// A worker that cannot set up training (worker 0's metrics file: a folder holds its .partial
// name) stops every rank at once with its message: the workers agree on it before the backend
// starts, and a dedicated server, waiting for every worker's start message, is told why. (The
// server waited for its --timeout and then named worker 0 as silent; worker 1 waited for it.)
TEST(PsStart, AWorkerThatCannotSetUpStopsEveryRankAtOnce) {
  using Clock = std::chrono::steady_clock;
  const std::string dir = testing::scratch_dir("ps_edges_set_up");
  std::filesystem::create_directories(dir + "/m.jsonl.partial");
  for (const char* servers : {"1", "colocated"}) {
    Config cfg = ps_config(servers);
    cfg.sync.timeout_s = 20;  // what a rank left waiting would sit out
    cfg.out.metrics_file = dir + "/m.jsonl";
    const auto data = load_data(cfg);
    const int n = world_of(cfg, 2);
    std::vector<Clock::time_point> ended;
    const auto t0 = Clock::now();
    const auto errors = ps::testing::run_world(
        n,
        [&](std::shared_ptr<Comm> comm) {
          auto dev = make_device("cpu", 1, comm->rank());
          run_rank(cfg, comm, *dev, nullptr, &data.first, &data.second);
        },
        &ended);
    for (int r = 0; r < n; ++r) {
      const std::string& e = errors[static_cast<std::size_t>(r)];
      const double took =
          std::chrono::duration<double>(ended[static_cast<std::size_t>(r)] - t0).count();
      EXPECT_LT(took, 10.0) << servers << ", rank " << r << ": '" << e << "'";
      EXPECT_NE(e.find("cannot open metrics file " + dir + "/m.jsonl.partial"), std::string::npos)
          << servers << ", rank " << r << ": '" << e << "'";
    }
    EXPECT_NE(errors[1].find("rank 1: stopping, rank 0 could not set up training: "),
              std::string::npos)
        << servers << ": '" << errors[1] << "'";
    if (n == 3)
      EXPECT_NE(errors[2].find("server rank 2: stopping, worker rank 0 failed: "),
                std::string::npos)
          << "'" << errors[2] << "'";
  }
}

// Forwards to another Comm; once the owner (a server) has received a push of step `step` or later
// from worker index `worker`, its next poll stands still until release(), as a stopped server.
class StopAfterPush : public ps::ForwardingComm {
 public:
  StopAfterPush(std::shared_ptr<Comm> inner, int worker, std::int64_t step)
      : ForwardingComm(std::move(inner)), worker_(worker), step_(step) {}
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    return std::make_unique<ps::HookedRecv>(
        inner().irecv(buf, bytes, peer, tag), [this] { gate_.park_if([&] { return seen_; }); },
        [this, buf, tag] {
          if (tag != ps::kReqTag) return;
          ps::PsHeader h;
          std::memcpy(&h, buf, sizeof h);
          if (h.op == ps::Op::kPush && h.worker == worker_ && h.step >= step_)
            gate_.set([&] { seen_ = true; });
        });
  }
  void release() { gate_.release(); }

 private:
  const int worker_;
  const std::int64_t step_;
  ps::ParkGate gate_{Seconds(60.0)};
  bool seen_ = false;  // under gate_'s lock
};

// asp, a dedicated server that stops (stands still) while worker 1, ahead of a straggling
// worker 0, waits for it at the evaluation's first barrier, and worker 0 waits for a reply: worker
// 0 names the server when its reply is overdue, and worker 1 - whose barrier times out first -
// must name the server too, not worker 0 (which stopped because of it).
TEST(PsTrainerAsync, AWorkerAtABarrierNamesTheServerThatStopped) {
  Config cfg = ps_config("1");
  cfg.sync.consistency = "asp";
  cfg.sync.timeout_s = 2;
  cfg.train.eval_each_epoch = true;
  cfg.train.straggler = "0:30";  // worker 0: 30 ms a step, an epoch of 32 steps about 1 s
  const auto data = load_data(cfg);
  const ps::PsGroup group = ps::make_ps_group("1", 3);
  std::shared_ptr<StopAfterPush> server_comm;
  std::mutex mu;
  int workers_done = 0;
  const auto errors = ps::testing::run_world(
      3,
      [&](std::shared_ptr<Comm> comm) {
        comm->set_timeout(Seconds(cfg.sync.timeout_s));  // as run_train sets the world's
        auto opts = ps::worker_options(cfg.sync, nullptr);
        opts.shared_memory = false;
        if (group.is_dedicated_server(comm->rank())) {
          {
            std::lock_guard<std::mutex> lk(mu);
            server_comm = std::make_shared<StopAfterPush>(comm, 0, 25);
          }
          ps::ServerLoop(server_comm, group, ps::testing::server_options(opts)).run();
          return;
        }
        auto dev = make_device("cpu", 1, comm->rank());
        opts.fault = cfg.train.fault;
        ps::PsWorker sync(comm, group, opts);
        SubComm workers(comm, group.worker_ranks);
        Trainer(cfg, TrainerEnv{workers, sync, *dev, nullptr}).run(data.first, data.second);
      },
      nullptr,
      [&](int rank) {  // the server stands still until both workers have given up
        if (rank == 2) return;
        std::lock_guard<std::mutex> lk(mu);
        if (++workers_done == 2 && server_comm) server_comm->release();
      });
  EXPECT_NE(errors[0].find("server rank 2"), std::string::npos) << "'" << errors[0] << "'";
  EXPECT_NE(errors[1].find("server rank 2"), std::string::npos) << "'" << errors[1] << "'";
}

}  // namespace
}  // namespace starring
