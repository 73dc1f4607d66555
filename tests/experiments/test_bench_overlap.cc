// The overlap benchmark (experiments/bench_overlap.h): OSU's arithmetic, the rows' means, and -
// measured in one run, compared with a wide margin, never against a fixed speed - that with a
// sleeping training thread the backends' communication threads hide most of the sync while the
// serial control (post after the compute) hides almost none, nor does a backend without a
// communication thread (a test backend in-process; osu_iallreduce's own pattern under MPI).
#include "allreduce/allreducer.h"
#include "allreduce/private_comm.h"
#include "common/error.h"
#include "experiments/backend_registry.h"
#include "experiments/bench_harness.h"
#include "experiments/bench_overlap.h"
#include "tests/allreduce/allreduce_test_util.h"

namespace starring {
namespace {

using namespace starring::test;

// A backend without a communication thread: tensor_ready only records, flush() all-reduces on
// the caller's thread. Nothing can progress during the compute, so the bench must read ~0 for it
// even with a sleeping training thread - the proof that the measure can fail.
class CallerThreadSync : public GradientSync {
 public:
  explicit CallerThreadSync(std::shared_ptr<Comm> world) : comm_(private_comm(world)) {
    engine_ = make_ring_allreducer(comm_, RingOptions{});
  }
  void start(const ParamLayout& layout, SyncBuffers b, const OptimizerConfig&) override {
    grads_ = b.grads;
    count_ = layout.total();
  }
  void begin_step(std::int64_t, float) override { pending_ = true; }
  void tensor_ready(std::size_t) override {}
  void wait_params(std::size_t) override { flush(); }
  void flush() override {
    if (pending_) engine_->run(grads_, grads_, count_, 1.0f / comm_->size());
    pending_ = false;
  }
  SyncStepStats take_stats() override { return {}; }
  void shutdown() override {}
  std::string name() const override { return "test-caller-thread"; }

 private:
  std::shared_ptr<Comm> comm_;
  std::unique_ptr<Allreducer> engine_;
  float* grads_ = nullptr;
  std::size_t count_ = 0;
  bool pending_ = false;
};
const BackendRegistrar kCallerThread("test-caller-thread", [](const BackendContext& c) {
  Backend b;
  b.workers = c.world;
  b.worker_index = c.world->rank();
  b.num_workers = c.world->size();
  b.sync = std::make_unique<CallerThreadSync>(c.world);
  return b;
});

TEST(OverlapArithmetic, OsuFormula) {
  // Full overlap: total = the longer of the two.
  EXPECT_DOUBLE_EQ(overlap_percent(10, 10, 10), 100);
  EXPECT_DOUBLE_EQ(overlap_percent(10, 12, 12), 100);
  // None: total = the sum.
  EXPECT_DOUBLE_EQ(overlap_percent(10, 10, 20), 0);
  // Half the communication hidden.
  EXPECT_DOUBLE_EQ(overlap_percent(10, 10, 15), 50);
  EXPECT_DOUBLE_EQ(overlap_percent(8, 10, 12), 75);
  // Clamped: slower than serial, or faster than the compute alone (noise).
  EXPECT_DOUBLE_EQ(overlap_percent(10, 10, 25), 0);
  EXPECT_DOUBLE_EQ(overlap_percent(10, 10, 9), 100);
  EXPECT_DOUBLE_EQ(overlap_percent(0, 10, 10), 0);
}

TEST(OverlapArithmetic, TensorSizesTileTheBuffer) {
  for (std::size_t count : {1u, 2u, 3u, 4u, 5u, 1023u, 262144u, 262147u}) {
    const auto sizes = overlap_tensor_sizes(count);
    EXPECT_EQ(sizes.size(), std::min<std::size_t>(4, count)) << count;
    std::size_t sum = 0;
    for (auto s : sizes) {
      EXPECT_GT(s, 0u) << count;
      sum += s;
    }
    EXPECT_EQ(sum, count);
  }
  EXPECT_THROW(overlap_tensor_sizes(0), Error);
}

TEST(OverlapArithmetic, RowsAverageOverWorkersThenApplyTheFormula) {
  // Worker 0: comm 10, sleep hidden completely; worker 1: comm 30, half hidden.
  OverlapSample a{10e-6, {10e-6, 10e-6}, {10e-6, 20e-6}, {10e-6, 10e-6}};
  OverlapSample b{30e-6, {30e-6, 30e-6}, {45e-6, 60e-6}, {31e-6, 30e-6}};
  OverlapRow base;
  base.backend = "ring";
  base.bytes = 4096;
  const auto rows = overlap_rows(base, {"sleep", "serial"}, {a, b});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].compute, "sleep");
  EXPECT_EQ(rows[1].compute, "serial");
  EXPECT_EQ(rows[0].backend, "ring");
  EXPECT_NEAR(rows[0].t_comm_us, 20, 1e-9);
  EXPECT_NEAR(rows[0].t_compute_us, 20, 1e-9);
  EXPECT_NEAR(rows[0].t_total_us, 27.5, 1e-9);
  EXPECT_NEAR(rows[0].t_inside_us, 20.5, 1e-9);
  EXPECT_NEAR(rows[0].overlap_pct, 62.5, 1e-9);  // 100 * (1 - 7.5 / 20)
  EXPECT_NEAR(rows[1].overlap_pct, 0, 1e-9);     // total 40 = compute 20 + comm 20
  const nlohmann::json j = to_json(rows[0]);
  for (const char* k : {"bench", "backend", "compute", "np", "workers", "servers", "sync_overlap",
                        "size", "count", "tensors", "iters", "t_comm_us", "t_compute_us",
                        "t_total_us", "t_inside_us", "overlap_pct"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["bench"], "overlap");
}

Config overlap_config(std::vector<std::string> backends, std::size_t bytes) {
  Config cfg;
  cfg.bench.mode = "overlap";
  cfg.bench.compute = {"sleep", "serial"};
  cfg.bench.min_bytes = cfg.bench.max_bytes = bytes;
  cfg.bench.iters = 6;
  cfg.bench.warmup = 3;
  cfg.bench.backends = std::move(backends);
  cfg.sync.timeout_s = 60;
  return cfg;
}

// Rows of one size: (sleep, serial) per backend. Returns what is wrong, or "" when the sleep
// hides clearly more of the sync than the serial control and the control stays low (`hides`),
// or when the sleep hides no more than half of it (!hides).
std::string judge(const std::vector<OverlapRow>& rows, bool hides) {
  std::string why;
  if (rows.empty() || rows.size() % 2) return "expected (sleep, serial) row pairs";
  for (std::size_t i = 0; i < rows.size(); i += 2) {
    const OverlapRow &sleep = rows[i], &serial = rows[i + 1];
    if (sleep.compute != "sleep" || serial.compute != "serial") return "rows out of order";
    const bool good = hides ? sleep.overlap_pct > serial.overlap_pct + 30 && serial.overlap_pct < 50
                            : sleep.overlap_pct < 50;
    if (!good)
      why += sleep.backend + ": sleep " + std::to_string(sleep.overlap_pct) + "%, serial " +
             std::to_string(serial.overlap_pct) + "%; ";
  }
  return why;
}

// Runs the bench until judge() is satisfied, at most 3 times: a loaded machine (other builds,
// spinning threads) can disturb one run by tens of percent, but a backend that behaves the
// other way fails every run. Every rank takes part; rank 0 judges and tells the others.
void expect_within_3_runs(const Config& cfg, const std::shared_ptr<Comm>& world, bool hides) {
  std::string why;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto rows = run_overlap_bench(cfg, world);
    int ok = 1;
    if (world->rank() == 0) {
      why = judge(rows, hides);
      ok = why.empty();
    }
    constexpr int kTag = tags::kBenchBase + 99;
    if (world->rank() == 0) {
      for (int r = 1; r < world->size(); ++r)
        world->send(&ok, sizeof ok, r, kTag, world->timeout());
    } else {
      world->recv(&ok, sizeof ok, 0, kTag, world->timeout());
    }
    if (ok) return;
  }
  EXPECT_TRUE(why.empty()) << why;
}

TEST(OverlapBench, InProcRingSleepOverlapsAndTheControlDoesNot) {
  INPROC_ONLY();
  inproc(2, [](std::shared_ptr<Comm> c) {
    expect_within_3_runs(overlap_config({"ring", "ps-colocated"}, 8 << 20), c, true);
  });
}

TEST(OverlapBench, InProcBackendWithoutCommunicationThreadReadsNoOverlap) {
  INPROC_ONLY();
  inproc(2, [](std::shared_ptr<Comm> c) {
    expect_within_3_runs(overlap_config({"test-caller-thread"}, 8 << 20), c, false);
  });
}

TEST(OverlapBench, UnknownBackendIsAConfigError) {
  INPROC_ONLY();
  inproc(1, [](std::shared_ptr<Comm> c) {
    EXPECT_THROW(run_overlap_bench(overlap_config({"no-such-backend"}, 4096), c), ConfigError);
  });
}

TEST(OverlapBench, MpiIallreduceWithoutThreadReadsNoOverlap) {
  MPI_ONLY();
  expect_within_3_runs(overlap_config({"mpi-nothread"}, 8 << 20), mpi_world(), false);
}

TEST(OverlapBench, MpiBackendsSleepOverlapsAndTheControlDoesNot) {
  MPI_ONLY();
  expect_within_3_runs(overlap_config({"ring", "mpi", "ps-colocated"}, 8 << 20), mpi_world(), true);
}

// mpi-nothread, the reference: one step through the seam all-reduces the whole buffer once
// (every element the closed-form sum), posted at the last tensor_ready.
TEST(OverlapBench, MpiNothreadSumsTheWholeBufferOnce) {
  MPI_ONLY();
  auto world = mpi_world();
  const std::size_t count = 1001;
  ParamLayout layout;
  const auto sizes = overlap_tensor_sizes(count);
  for (std::size_t t = 0; t < sizes.size(); ++t)
    layout.add("t" + std::to_string(t), {static_cast<int>(sizes[t])});
  std::vector<float> params(count), grads(count);
  for (std::size_t i = 0; i < count; ++i) grads[i] = input_value(world->rank(), i);
  auto sync = make_nothread_iallreduce(world, Seconds(60));
  sync->start(layout, SyncBuffers{params.data(), grads.data(), false, nullptr}, OptimizerConfig{});
  sync->begin_step(1, 0.0f);
  for (std::size_t t = 0; t < sizes.size(); ++t) sync->tensor_ready(t);
  for (std::size_t t = sizes.size(); t-- > 0;) sync->wait_params(t);
  sync->flush();
  sync->shutdown();
  long wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += grads[i] != expected_sum(world->size(), i);
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace starring
