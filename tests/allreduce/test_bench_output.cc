// What `starring bench` prints, against nccl-tests' conventions: a parameters line (minBytes,
// maxBytes, factor, warm-up and timed iterations, validation), and with -c 0 (no check) the
// #wrong column and the footer say N/A and the JSON rows carry "wrong": null, "checked": false:
// a result that was never compared must not read "0 OK".
#include <gtest/gtest.h>

#include "experiments/bench_harness.h"
#include "tests/allreduce/allreduce_test_util.h"

namespace starring {
namespace {

using namespace starring::test;

// A broken sum (element 3 off by one): a checked run must count it, an unchecked one cannot.
class OffByOneOutputOp : public BenchOp {
 public:
  explicit OffByOneOutputOp(const BenchOpContext& ctx) : comm_(ctx.world) {}
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
const BenchOpRegistrar kBroken("test-output-off-by-one", [](const BenchOpContext& c) {
  return std::make_unique<OffByOneOutputOp>(c);
});

struct Printed {
  std::vector<BenchRow> rows;
  std::string text;
};

Printed run_bench(int check) {
  Printed p;
  Config cfg;
  cfg.bench.min_bytes = 4096;
  cfg.bench.max_bytes = 16384;
  cfg.bench.factor = 4;
  cfg.bench.iters = 3;
  cfg.bench.warmup = 2;
  cfg.bench.check = check;
  cfg.bench.json = true;
  cfg.bench.memcpy_baseline = false;
  cfg.bench.backends = {"test-output-off-by-one"};
  testing::internal::CaptureStdout();
  inproc(2, [&](std::shared_ptr<Comm> c) {
    auto rows = run_bench_harness(cfg, c, nullptr);
    if (c->rank() == 0) p.rows = rows;
  });
  p.text = testing::internal::GetCapturedStdout();
  return p;
}

TEST(BenchOutput, ParametersLineLikeNcclTests) {
  INPROC_ONLY();
  const Printed p = run_bench(1);
  EXPECT_NE(p.text.find("#  minBytes 4096 maxBytes 16384 step: 4(factor) warmup iters: 2 iters: 3 "
                        "validation: 1\n"),
            std::string::npos)
      << p.text;
  ASSERT_EQ(p.rows.size(), 2u);
  for (const auto& r : p.rows) {
    EXPECT_TRUE(r.checked);
    EXPECT_EQ(r.wrong, 2) << "one wrong element per worker";
    const nlohmann::json j = to_json(r);
    EXPECT_EQ(j.at("wrong"), 2);
    EXPECT_EQ(j.at("checked"), true);
    EXPECT_EQ(j.at("iters"), 3);
    EXPECT_EQ(j.at("warmup"), 2);
  }
  EXPECT_NE(p.text.find("Out of bounds values : 4 FAILED"), std::string::npos) << p.text;
}

TEST(BenchOutput, NoCheckSaysNotApplicableInsteadOfZeroOk) {
  INPROC_ONLY();
  const Printed p = run_bench(0);
  EXPECT_NE(p.text.find("validation: 0\n"), std::string::npos) << p.text;
  ASSERT_EQ(p.rows.size(), 2u);
  for (const auto& r : p.rows) {
    EXPECT_FALSE(r.checked);
    const nlohmann::json j = to_json(r);
    EXPECT_TRUE(j.at("wrong").is_null()) << j.dump();
    EXPECT_EQ(j.at("checked"), false);
  }
  EXPECT_EQ(p.text.find(" OK\n"), std::string::npos) << p.text;
  EXPECT_NE(p.text.find("Out of bounds values : N/A (not checked: -c 0)"), std::string::npos)
      << p.text;
  // the #wrong column of both table rows
  std::size_t na = 0;
  for (std::size_t at = p.text.find("float"); at != std::string::npos;
       at = p.text.find("float", at + 1)) {
    const std::size_t eol = p.text.find('\n', at);
    const std::string line = p.text.substr(at, eol - at);
    if (line.find("N/A") != std::string::npos && line.find('{') == std::string::npos) ++na;
  }
  EXPECT_EQ(na, 2u) << p.text;
}

}  // namespace
}  // namespace starring
