// The parameter server with ranks as threads (InProcWorld):
//  - bsp equals the single-process reference bit for bit, for W in {1,2,4} x S in {1,2,3} and
//    co-located, with sgd and adamw (gradients are exact dyadic values, see ps_test_util.h);
//  - ssp: with one worker slowed down, the servers' record shows no push more than s clocks
//    ahead of the slowest worker (and asp, the same run unbounded, does exceed s);
//  - a silent worker and a silent server (either of two) each end every rank with an error
//    naming them, and a hung server the step it hung at;
//  - a server's busy_s is within its wall_s; a worker's take_stats counts one push-pull window a
//    step, comm_s = push_s + pull_s, and its waits once, also when a push's send is seen done
//    only after its reply;
//  - the data goes through shared segments (the ranks share a host), or in the messages when
//    shared memory is off, with the same results.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>

#include "common/error.h"
#include "ps_test_util.h"
#include "tests/ps/forwarding_comm.h"
#include "tests/scheduling_lag.h"

namespace starring::ps {
namespace {

using namespace starring::ps::testing;
using Clock = std::chrono::steady_clock;

struct RunResult {
  std::vector<std::vector<float>> params;  // by worker index
  std::vector<nlohmann::json> server_stats;
  std::vector<std::string> errors;       // by rank
  std::vector<Clock::time_point> ended;  // by rank
};

// Runs W workers (train_worker) and the servers of `servers` ("S" or "colocated").
RunResult run_ps(int workers, const std::string& servers, int steps, const OptimizerConfig& oc,
                 const PsWorkerOptions& opt,
                 const std::function<void(int worker, int step)>& hook = {},
                 const std::function<void(int rank)>& on_end = {}) {
  const int n = servers == "colocated" ? workers : workers + std::stoi(servers);
  const PsGroup group = make_ps_group(servers, n);
  RunResult res;
  res.params.resize(static_cast<std::size_t>(workers));
  res.server_stats.resize(static_cast<std::size_t>(group.num_servers()));
  res.errors = run_world(
      n,
      [&](std::shared_ptr<Comm> comm) {
        const int r = comm->rank();
        if (group.is_dedicated_server(r)) {
          ServerLoop loop(comm, group, server_options(opt));
          res.server_stats[static_cast<std::size_t>(group.server_index(r))] = loop.run();
          return;
        }
        const int w = group.worker_index(r);
        PsWorker ps(comm, group, opt);
        auto before = [&](int t) {
          if (hook) hook(w, t);
        };
        res.params[static_cast<std::size_t>(w)] = train_worker(ps, w, steps, oc, before);
        if (group.colocated) res.server_stats[static_cast<std::size_t>(w)] = ps.server_stats()[w];
      },
      &res.ended, on_end);
  return res;
}

void expect_no_errors(const RunResult& r) {
  for (std::size_t k = 0; k < r.errors.size(); ++k) EXPECT_EQ(r.errors[k], "") << "rank " << k;
}

class PsBspEquivalence
    : public ::testing::TestWithParam<std::tuple<int, std::string, std::string>> {};

TEST_P(PsBspEquivalence, EqualsSingleProcessReference) {
  const auto& [workers, servers, opt_type] = GetParam();
  const int steps = 4;
  const OptimizerConfig oc = test_opt(opt_type);
  RunResult r = run_ps(workers, servers, steps, oc, test_options("bsp"));
  expect_no_errors(r);
  const auto ref = reference(test_layout(), workers, steps, oc);
  for (int w = 0; w < workers; ++w) {
    const auto& p = r.params[static_cast<std::size_t>(w)];
    ASSERT_EQ(p.size(), ref.size());
    long wrong = 0;
    for (std::size_t i = 0; i < p.size(); ++i) wrong += p[i] != ref[i];
    EXPECT_EQ(wrong, 0) << "worker " << w << ": first value " << p[0] << " vs " << ref[0];
  }
  // bsp never lets a worker ahead: the staleness record is all zeros.
  for (const auto& s : r.server_stats) {
    ASSERT_TRUE(s.is_object());
    EXPECT_EQ(s["staleness_hist"].size(), 1u) << s.dump();
    EXPECT_EQ(s["rounds"].get<int>(), steps);
    expect_data_path(s, true);
    // The time the server spent on pushes (bench's server_busy_frac, a run record's busy_s) is
    // some of its life and no more (co-located: as sent with its goodbye, which bench reads).
    EXPECT_GT(s["busy_s"].get<double>(), 0.0) << s.dump();
    EXPECT_LE(s["busy_s"].get<double>(), s["wall_s"].get<double>()) << s.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(WorkersByServers, PsBspEquivalence,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values("1", "2", "3", "colocated"),
                                            ::testing::Values("sgd", "adamw")),
                         [](const auto& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) + "_S" +
                                  std::get<1>(info.param) + "_" + std::get<2>(info.param);
                         });

TEST(PsInproc, TensorPartitionOverlapOffAndOddChunkBytesAlsoEqualReference) {
  const OptimizerConfig oc = test_opt("sgd");
  const auto ref = reference(test_layout(), 2, 3, oc);
  for (int variant = 0; variant < 3; ++variant) {
    auto opt = test_options("bsp");
    if (variant == 0) opt.partition = "tensor";
    if (variant == 1) opt.overlap = false;
    if (variant == 2) opt.chunk_bytes = 7;  // not a multiple of 4: chunks of one float
    RunResult r = run_ps(2, "2", 3, oc, opt);
    expect_no_errors(r);
    EXPECT_EQ(r.params[0], ref) << "variant " << variant;
    EXPECT_EQ(r.params[1], ref) << "variant " << variant;
  }
}

// Without shared memory the data travels in the messages; the results are the same.
TEST(PsInproc, MessagePathWithoutSharedMemoryEqualsReference) {
  const OptimizerConfig oc = test_opt("adamw");
  for (const std::string servers : {"2", "colocated"}) {
    auto opt = test_options("bsp");
    opt.shared_memory = false;
    RunResult r = run_ps(3, servers, 3, oc, opt);
    expect_no_errors(r);
    const auto ref = reference(test_layout(), 3, 3, oc);
    for (const auto& p : r.params) EXPECT_EQ(p, ref) << "servers " << servers;
    for (const auto& s : r.server_stats) {
      EXPECT_GT(s["push_bytes_in"].get<std::uint64_t>(), 0u) << s.dump();
      expect_data_path(s, false);
    }
  }
}

// A start message (kInit: the JSON PsInitSpec, which lists every chunk) may fill a worker ->
// server message up to the server's receive buffer (max_request_bytes: header + 1 MiB at small
// chunks), as the worker checks. It was built with make_text_message, which cuts text to a
// control message's kMaxCtlBytes less the header: a spec of 1 MiB - 31 .. 1 MiB bytes passed the
// check and reached the server cut short, as invalid JSON (a json parse_error on every rank).
// Here one tensor of one-float chunks whose spec lands in that window.
TEST(PsInproc, StartMessageUpToTheReceiveBufferArrivesWhole) {
  PsWorkerOptions opt = test_options("bsp");
  opt.chunk_bytes = 4;        // a chunk a float: the spec grows with the model
  opt.bucket_mb = 1024;       // one bucket
  opt.shared_memory = false;  // no segment in the start message
  const OptimizerConfig oc = test_opt("sgd");
  auto spec_text = [&](std::size_t total) {  // as PsWorker::send_init writes it: one server
    PsInitSpec spec;
    spec.num_workers = 1;
    spec.total = total;
    spec.chunk_bytes = opt.chunk_bytes;
    spec.consistency = opt.consistency;
    spec.staleness = opt.staleness;
    spec.update = opt.update;
    spec.opt = oc;
    for (std::size_t c = 0; c < total; ++c) spec.chunks.push_back({static_cast<int>(c), c, 1});
    return spec.to_json().dump().size();
  };
  const std::size_t cut = kMaxCtlBytes - sizeof(PsHeader);  // what make_text_message keeps
  const std::size_t fits = max_request_bytes(opt.chunk_bytes) - sizeof(PsHeader);
  std::size_t total = cut / 16;
  while (spec_text(total) <= cut) total += 1 + (cut - spec_text(total)) / 32;
  ASSERT_LE(spec_text(total), fits) << total << " floats";
  ParamLayout layout;
  layout.add("w", {static_cast<int>(total)});
  const PsGroup group = make_ps_group("1", 2);
  const auto errors = run_world(2, [&](std::shared_ptr<Comm> comm) {
    if (group.is_dedicated_server(comm->rank())) {
      ServerLoop(comm, group, server_options(opt)).run();
      return;
    }
    std::vector<float> p(total, 0.5f), g(total, 0.0f);
    PsWorker ps(comm, group, opt);
    ps.start(layout, {p.data(), g.data(), false, nullptr}, oc);
    ps.shutdown();
  });
  EXPECT_EQ(errors[0], "") << "worker, a start message of " << spec_text(total) << " bytes";
  EXPECT_EQ(errors[1], "") << "server";
}

// Largest staleness recorded by any server.
std::int64_t max_staleness(const RunResult& r) {
  std::int64_t m = -1;
  for (const auto& s : r.server_stats)
    for (const auto& [k, v] : s["staleness_hist"].items())
      if (v.get<std::uint64_t>() > 0) m = std::max<std::int64_t>(m, std::stol(k));
  return m;
}

TEST(PsInproc, SspBoundsHowFarAheadOfTheSlowestAWorkerRuns) {
  const int s = 1, steps = 10;
  auto slow = [](int w, int) {
    if (w == 2) std::this_thread::sleep_for(std::chrono::milliseconds(15));
  };
  auto opt = test_options("ssp");
  opt.staleness = s;
  RunResult r = run_ps(3, "1", steps, test_opt("sgd"), opt, slow);
  expect_no_errors(r);
  EXPECT_EQ(max_staleness(r), s) << r.server_stats[0].dump();  // reached, never exceeded

  // The same run without the bound: the fast workers do run further ahead.
  RunResult a = run_ps(3, "1", steps, test_opt("sgd"), test_options("asp"), slow);
  expect_no_errors(a);
  EXPECT_GT(max_staleness(a), s) << a.server_stats[0].dump();

  // Co-located servers keep the same bound.
  RunResult c = run_ps(3, "colocated", steps, test_opt("sgd"), opt, slow);
  expect_no_errors(c);
  EXPECT_LE(max_staleness(c), s);
  EXPECT_GE(max_staleness(c), 0) << "no staleness recorded";  // -1 passed the bound above
}

TEST(PsInproc, AspWithOneWorkerEqualsReference) {
  const OptimizerConfig oc = test_opt("sgd");
  RunResult r = run_ps(1, "2", 3, oc, test_options("asp"));
  expect_no_errors(r);
  EXPECT_EQ(r.params[0], reference(test_layout(), 1, 3, oc));
}

// A worker's Comm whose pushes are seen complete only after their replies: Open MPI may report
// a send done on a later test than the reply that proves it arrived (the completion is noticed by
// a later progress call). A push's send tests false until its chunk's reply has been received.
class LateSendComm : public ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    auto r = inner().isend(buf, bytes, peer, tag);
    PsHeader h;
    if (tag != kReqTag || bytes < sizeof(h)) return r;
    std::memcpy(&h, buf, sizeof(h));
    if (h.op != Op::kPush) return r;
    return std::make_unique<LateSend>(std::move(r), replies_, h.chunk);
  }
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    auto r = inner().irecv(buf, bytes, peer, tag);
    if (tag < kReplyTagBase || tag >= kReplyTagBase + kMaxChunks) return r;
    return std::make_unique<HookedRecv>(
        std::move(r), nullptr, [replies = replies_, c = tag - kReplyTagBase] { ++(*replies)[c]; });
  }

 private:
  using Replies = std::map<int, int>;  // chunk -> replies received (the comm thread's alone)
  class LateSend : public Request {
   public:
    LateSend(std::unique_ptr<Request> r, std::shared_ptr<Replies> replies, int chunk)
        : r_(std::move(r)),
          replies_(std::move(replies)),
          chunk_(chunk),
          before_((*replies_)[chunk]) {}
    bool test() override { return (*replies_)[chunk_] > before_ && r_->test(); }
    RecvStatus wait(Seconds timeout) override { return r_->wait(timeout); }
    RecvStatus status() const override { return r_->status(); }

   private:
    std::unique_ptr<Request> r_;
    std::shared_ptr<Replies> replies_;
    int chunk_, before_;
  };
  std::shared_ptr<Replies> replies_ = std::make_shared<Replies>();
};

// What a worker reports of its steps (take_stats, the trainer's step-time breakdown): one
// push-pull window a step (ps_rounds), whose time from the first push to the last reply (comm_s)
// is the time until the last push had left (push_s) and from then to the last reply (pull_s);
// and the time the trainer waited for parameters (wait_s): worker 1 starts each step 20 ms late,
// so worker 0 waits for its pushes every step, within its own wall time. With late-seen sends
// (LateSendComm) the replies end a window before its pushes are seen done: the push time still
// ends no later than the last reply, and the pull time is not measured from the previous step.
// Copying the gradients into the push messages or segments is timed as stage_s.
TEST(PsInproc, StepStatsCountEachStepsWindowAndWaitOnce) {
  constexpr int kSteps = 6;
  for (const auto& [late, servers] : std::vector<std::pair<bool, std::string>>{
           {false, "1"}, {false, "colocated"}, {true, "1"}, {true, "colocated"}}) {
    const int n = servers == "1" ? 3 : 2;  // 2 workers (+ 1 server)
    const PsGroup group = make_ps_group(servers, n);
    std::vector<std::map<std::string, double>> sums(2);
    std::vector<double> wall(2);
    const auto errors = run_world(n, [&](std::shared_ptr<Comm> comm) {
      const auto opt = test_options("bsp");
      if (group.is_dedicated_server(comm->rank())) {
        ServerLoop(comm, group, server_options(opt)).run();
        return;
      }
      const int w = group.worker_index(comm->rank());
      auto& sum = sums[static_cast<std::size_t>(w)];
      PsWorker ps(late ? std::make_shared<LateSendComm>(comm) : comm, group, opt);
      const auto t0 = Clock::now();
      train_worker(
          ps, w, kSteps, test_opt("sgd"),
          [w](int) {
            if (w == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          },
          [&sum](const SyncStepStats& s) {
            sum["comm_s"] += s.comm_s;
            sum["wait_s"] += s.wait_s;
            for (const auto& [k, v] : s.extra) sum[k] += v;
          });
      wall[static_cast<std::size_t>(w)] = Seconds(Clock::now() - t0).count();
    });
    for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    for (int w = 0; w < 2; ++w) {
      auto& s = sums[static_cast<std::size_t>(w)];
      SCOPED_TRACE("--servers " + servers + ", worker " + std::to_string(w) +
                   (late ? ", sends seen late" : ""));
      EXPECT_EQ(s["ps_rounds"], kSteps);
      EXPECT_GT(s["push_s"], 0.0);
      EXPECT_GT(s["pull_s"], 0.0);
      EXPECT_NEAR(s["comm_s"], s["push_s"] + s["pull_s"], 1e-9);
      EXPECT_LE(s["comm_s"], wall[static_cast<std::size_t>(w)]);
      // stage_s: copying the gradients out for the pushes (never read by a test before:
      // helper-112's mutation test dropped it unseen).
      EXPECT_GT(s["stage_s"], 0.0);
      EXPECT_LE(s["stage_s"], wall[static_cast<std::size_t>(w)]);
      EXPECT_LE(s["wait_s"], wall[static_cast<std::size_t>(w)]);
    }
    EXPECT_GT(sums[0]["wait_s"], 0.0) << "--servers " << servers;
  }
}

bool names(const std::string& err, const std::string& who) {
  return err.find(who) != std::string::npos;
}

// A silent rank's silence lasts until every other rank has ended, not a fixed time that a loaded
// machine could outlast: the others must time out to end. Were a timeout never to fire, the
// silent rank would come back after 30 s and the others would end without an error.
class Silence {
 public:
  explicit Silence(int others) : others_(others) {}
  void rank_ended() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++ended_;
    }
    cv_.notify_all();
  }
  void keep() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(30), [&] { return ended_ >= others_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int others_, ended_ = 0;
};

// "Within the timeout": the others end within 2.5 s of the silence (the timeout, the worker's
// grace and slack), plus how late this process ran meanwhile (the control, measured in the same
// run, tests/scheduling_lag.h).
constexpr double kWithin = 2.5;

TEST(PsInproc, SilentWorkerIsNamedByEveryRankWithinTheTimeout) {
  auto opt = test_options("bsp");
  opt.timeout = Seconds(1.0);
  Clock::time_point silent_at;
  Silence silence(2);
  // Ranks: workers 0, 1; server 2. Worker 1 goes silent before step 3.
  auto hook = [&](int w, int t) {
    if (w == 1 && t == 3) {
      silent_at = Clock::now();
      silence.keep();
    }
  };
  starring::testing::SchedulingLag lag;
  RunResult r = run_ps(2, "1", 6, test_opt("sgd"), opt, hook, [&](int) { silence.rank_ended(); });
  const double late = lag.stop();
  for (int k : {0, 2}) {
    EXPECT_TRUE(names(r.errors[k], "worker rank 1")) << "rank " << k << ": " << r.errors[k];
    EXPECT_TRUE(names(r.errors[k], "timeout")) << "rank " << k << ": " << r.errors[k];
    EXPECT_LT(Seconds(r.ended[k] - silent_at).count(), kWithin + late)
        << "rank " << k << "; this process ran " << late << " s late";
  }
}

TEST(PsInproc, SilentColocatedWorkerIsNamedByTheOthers) {
  auto opt = test_options("bsp");
  opt.timeout = Seconds(1.0);
  Clock::time_point silent_at;
  Silence silence(2);
  auto hook = [&](int w, int t) {
    if (w == 2 && t == 3) {
      silent_at = Clock::now();
      silence.keep();
    }
  };
  starring::testing::SchedulingLag lag;
  RunResult r =
      run_ps(3, "colocated", 6, test_opt("sgd"), opt, hook, [&](int) { silence.rank_ended(); });
  const double late = lag.stop();
  for (int k : {0, 1}) {
    EXPECT_TRUE(names(r.errors[k], "worker rank 2")) << "rank " << k << ": " << r.errors[k];
    EXPECT_LT(Seconds(r.ended[k] - silent_at).count(), kWithin + late)
        << "rank " << k << "; this process ran " << late << " s late";
  }
}

// A worker silent before its start message: the server names it (it has waited --timeout from
// its own start) and stops the others with that message before their wait for the start
// acknowledgement (--timeout + grace since their start message) runs out and names the server.
TEST(PsInproc, WorkerSilentAtTheStartIsNamedByTheServerBeforeTheOthersWaitForTheAckEnds) {
  auto opt = test_options("bsp");
  opt.timeout = Seconds(1.0);
  Silence silence(2);
  const PsGroup group = make_ps_group("1", 3);  // workers 0, 1; server 2
  const auto t0 = Clock::now();
  std::vector<Clock::time_point> ended;
  starring::testing::SchedulingLag lag;
  const auto errors = run_world(
      3,
      [&](std::shared_ptr<Comm> comm) {
        const int r = comm->rank();
        if (group.is_dedicated_server(r)) {
          ServerLoop(comm, group, server_options(opt)).run();
        } else if (r == 1) {
          silence.keep();  // never starts
        } else {
          PsWorker ps(comm, group, opt);
          train_worker(ps, 0, 2, test_opt("sgd"));
        }
      },
      &ended,
      [&](int r) {
        if (r != 1) silence.rank_ended();
      });
  const double late = lag.stop();
  for (int k : {0, 2}) {
    EXPECT_TRUE(names(errors[k],
                      "worker rank 1 (worker 1) sent nothing while this server waited "
                      "for it to start"))
        << "rank " << k << ": " << errors[k];
    EXPECT_FALSE(names(errors[k], "start acknowledgement")) << "rank " << k << ": " << errors[k];
    EXPECT_LT(Seconds(ended[k] - t0).count(), kWithin + late)
        << "rank " << k << "; this process ran " << late << " s late";
  }
}

TEST(PsInproc, SilentServerIsNamedByEveryRankWithinTheTimeout) {
  // Ranks: workers 0, 1; servers 2, 3. Either server hangs at step 3: the one named is the one
  // that owns the late chunk, whichever that is (chunk 0, the last tensor's, is server rank 3's).
  // The run with server rank 2 hung starts once the other ranks of the one with server rank 3
  // hung have ended: that server's hang (idle) goes on meanwhile.
  const auto hang = [](int hung, Silence* others) {
    auto opt = test_options("bsp");
    opt.timeout = Seconds(1.0);
    opt.fault = "hang:" + std::to_string(hung) + ":3";
    starring::testing::SchedulingLag lag;
    const auto t0 = Clock::now();
    RunResult r = run_ps(2, "2", 6, test_opt("sgd"), opt, {}, [&](int rank) {
      if (others && rank != hung) others->rank_ended();
    });
    const double late = lag.stop();
    const std::string who = "server rank " + std::to_string(hung);
    for (int k : {0, 1, 5 - hung}) {
      EXPECT_TRUE(names(r.errors[k], who)) << "rank " << k << ": " << r.errors[k];
      EXPECT_TRUE(names(r.errors[k], "timeout")) << "rank " << k << ": " << r.errors[k];
      // --fault hang:R:3 goes silent at the first push of step 3, not later: the workers'
      // reports (and the other server's, which forwards one of them) name that step.
      EXPECT_TRUE(names(r.errors[k], "(step 3;")) << "rank " << k << ": " << r.errors[k];
      // The hang lasts 3 timeouts + 1 s, then the server fails without a word: the others must
      // have given up well before.
      EXPECT_LT(Seconds(r.ended[k] - t0).count(), kWithin + late)
          << "rank " << k << "; this process ran " << late << " s late";
    }
  };
  Silence first_others(3);
  auto first = std::async(std::launch::async, hang, 3, &first_others);
  first_others.keep();
  hang(2, nullptr);
  first.get();
}

}  // namespace
}  // namespace starring::ps
