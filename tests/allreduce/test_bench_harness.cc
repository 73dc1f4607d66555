// The bench harness: rows, bus factor, bytes per rank, and a wrong result is counted as wrong.
#include "common/error.h"
#include "experiments/bench_harness.h"
#include "tests/allreduce/allreduce_test_util.h"

namespace starring {
namespace {

using namespace starring::test;

// A deliberately broken all-reduce: the sum, except element 3 is off by one.
class OffByOneOp : public BenchOp {
 public:
  explicit OffByOneOp(const BenchOpContext& ctx) : comm_(ctx.world) {}
  int worker_index() const override { return comm_->rank(); }
  int workers() const override { return comm_->size(); }
  double bus_factor() const override { return 1.0; }
  void prepare(const float*, std::size_t count) override { count_ = count; }
  void run() override {}
  void result(float* out) override {
    for (std::size_t i = 0; i < count_; ++i) out[i] = expected_sum(workers(), i);
    if (count_ > 3) out[3] += 1;
  }

 private:
  std::shared_ptr<Comm> comm_;
  std::size_t count_ = 0;
};
const BenchOpRegistrar kBroken("test-off-by-one", [](const BenchOpContext& c) {
  return std::make_unique<OffByOneOp>(c);
});

Config bench_config(std::vector<std::string> backends) {
  Config cfg;
  cfg.bench.min_bytes = 4096;
  cfg.bench.max_bytes = 1 << 20;
  cfg.bench.factor = 4;
  cfg.bench.iters = 2;
  cfg.bench.warmup = 1;
  cfg.bench.json = true;
  cfg.bench.backends = std::move(backends);
  cfg.sync.segment_bytes = 64 << 10;
  return cfg;
}

TEST(BenchHarness, RingRowsAreCorrectAndCountBytes) {
  INPROC_ONLY();
  for (int n : {1, 3, 4}) {
    inproc(n, [n](std::shared_ptr<Comm> c) {
      Config cfg = bench_config({"ring", "test-off-by-one"});
      auto rows = run_bench_harness(cfg, c, nullptr);
      if (c->rank() != 0) return;
      ASSERT_EQ(rows.size(), 2u * 5);  // 4 K, 16 K, 64 K, 256 K, 1 M
      for (const auto& r : rows) {
        EXPECT_EQ(r.np, n);
        EXPECT_EQ(r.count * 4, r.bytes);
        nlohmann::json j = to_json(r);
        for (const char* k : {"bench", "backend", "np", "workers", "servers", "size", "count",
                              "type", "time_us", "algbw_GBps", "busbw_GBps", "wrong", "memcpy_GBps",
                              "bytes_sent_per_rank", "bytes_recv_per_rank"})
          EXPECT_TRUE(j.contains(k)) << k;
        if (r.backend == "ring") {
          EXPECT_EQ(r.wrong, 0);
          EXPECT_DOUBLE_EQ(r.busbw_GBps, r.algbw_GBps * 2.0 * (n - 1) / n);
          const double ideal = 2.0 * (n - 1) / n * r.bytes;
          EXPECT_NEAR(r.bytes_sent_per_rank, ideal, 64.0 * n) << r.bytes;
          EXPECT_NEAR(r.bytes_recv_per_rank, ideal, 64.0 * n) << r.bytes;
        } else {
          EXPECT_EQ(r.wrong, n) << "one wrong element per worker";
        }
      }
    });
  }
}

TEST(BenchHarness, BadFlagsAndUnknownBackendAreConfigErrors) {
  INPROC_ONLY();
  inproc(1, [](std::shared_ptr<Comm> c) {
    Config cfg = bench_config({"no-such-backend"});
    EXPECT_THROW(run_bench_harness(cfg, c, nullptr), ConfigError);
    cfg = bench_config({"ring"});
    cfg.bench.factor = 1;
    EXPECT_THROW(run_bench_harness(cfg, c, nullptr), ConfigError);
  });
}

}  // namespace
}  // namespace starring
