// What `starring bench` prints: the parameters line, N/A without a check, "vs base" across
// shapes, the %memcpy column and footer. Compiled into test_bench_harness, whose file registers the
// deliberately broken ops ("test-off-by-one", "test-opaque-bus") these cases run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/bench_harness.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/allreduce/bench_test_util.h"

namespace starring {
namespace {

using namespace starring::test;

// What `starring bench` prints, against nccl-tests' conventions: a parameters line (minBytes,
// maxBytes, factor, warm-up and timed iterations, validation), and with -c 0 (no check) the
// #wrong column and the footer say N/A and the JSON rows carry "wrong": null, "checked": false:
// a result that was never compared must not read "0 OK".
struct Printed {
  std::vector<BenchRow> rows;
  std::string text;
};

// The bench over `ranks` in-process ranks: rank 0's rows and what was printed.
Printed run_printed(int ranks, const Config& cfg) {
  Printed p;
  ::testing::internal::CaptureStdout();
  inproc(ranks, [&](std::shared_ptr<Comm> c) {
    auto rows = run_bench_harness(cfg, c, nullptr);
    if (c->rank() == 0) p.rows = rows;
  });
  p.text = ::testing::internal::GetCapturedStdout();
  return p;
}

Printed run_bench(int check) {
  Config cfg = bench_config({"test-off-by-one"});
  cfg.bench.max_bytes = 16384;
  cfg.bench.iters = 3;
  cfg.bench.warmup = 2;
  cfg.bench.check = check;
  cfg.bench.memcpy_baseline = false;
  return run_printed(2, cfg);
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
  // the host's load when it started: a busy machine's times are not the backends'
  EXPECT_NE(p.text.find("#  load average at start: "), std::string::npos) << p.text;
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

// Backends of different shapes in one table (np 3, --servers 1): ps runs 2 workers and 1 server,
// ring@2 2 workers on 2 ranks, ps-colocated 3 workers on 3 ranks like the base (ring). Each row
// shows its shape, and "vs base" compares only rows of the base's shape: ps against the ring on
// 3 workers had read as a speed-up, though its busbw counts another link and its time 2 workers.
TEST(BenchOutput, VsBaseComparesOnlyRowsOfTheBasesShape) {
  INPROC_ONLY();
  Config cfg = bench_config({"ring", "ps", "ps-colocated", "ring@2"});
  cfg.bench.max_bytes = 16384;
  cfg.bench.memcpy_baseline = false;
  cfg.sync.servers = "1";
  cfg.sync.timeout_s = 60;
  const Printed p = run_printed(3, cfg);
  ASSERT_EQ(p.rows.size(), 4u * 2);  // 4 K, 16 K
  for (const auto& r : p.rows) {
    SCOPED_TRACE(r.backend + " " + std::to_string(r.bytes) + " B");
    const nlohmann::json j = to_json(r);
    EXPECT_EQ(j.at("base"), "ring");
    const std::string shape = r.backend == "ps"             ? "W=2,S=1"
                              : r.backend == "ps-colocated" ? "W=3,co"
                              : r.backend == "ring@2"       ? "W=2"
                                                            : "W=3";
    EXPECT_EQ(shape_label(r), shape);
    EXPECT_EQ(j.at("ranks_used"), r.backend == "ring@2" ? 2 : 3);
    const bool compared = r.backend == "ring" || r.backend == "ps-colocated";
    EXPECT_EQ(j.at("vs_base").is_null(), !compared) << j.dump();
    if (r.backend == "ring") EXPECT_EQ(j.at("vs_base"), 1.0);
    // the table's row: its backend, its shape, ..., and "vs base" last
    char head[64];  // backend (the column as wide as "ps-colocated"), shape, size
    std::snprintf(head, sizeof head, "   %-12s %-9s %12zu ", r.backend.c_str(), shape.c_str(),
                  r.bytes);
    const std::size_t at = p.text.find(head);
    ASSERT_NE(at, std::string::npos) << head << "\n" << p.text;
    const std::string line = p.text.substr(at, p.text.find('\n', at) - at);
    const std::string last = line.substr(line.find_last_of(' ') + 1);
    if (r.backend == "ring")
      EXPECT_EQ(last, "base") << line;
    else if (compared)
      EXPECT_EQ(last.back(), 'x') << line;
    else
      EXPECT_EQ(last, "-") << line;
  }
  EXPECT_NE(p.text.find("vs base = busbw / busbw of ring (W=3) at the same size, on rows of that "
                        "shape only"),
            std::string::npos)
      << p.text;
}

// The printed figures that derive from busbw: the %memcpy column is busbw (not algbw) over this
// machine's memcpy bandwidth, and the footer's "Avg bus bandwidth" the mean of the backend's rows
// (not their sum). Over an opaque transport the bytes per rank are the op's bus bytes, size x bus
// factor, marked as not measured. Each of the three read algbw, the sum or the size alone and
// passed every other test.
TEST(BenchOutput, MemcpyColumnFooterAndReferenceBytesFollowTheBusFactor) {
  INPROC_ONLY();
  Config cfg = bench_config({"test-opaque-bus"});
  cfg.bench.min_bytes = 256 << 10;  // 256 K and 1 M: about 0.4 and 1.5 GB/s busbw at 1 ms a run
  cfg.bench.memcpy_baseline = true;
  const Printed p = run_printed(2, cfg);
  ASSERT_EQ(p.rows.size(), 2u);
  double busbw = 0;
  for (const auto& r : p.rows) {
    SCOPED_TRACE(std::to_string(r.bytes) + " B");
    busbw += r.busbw_GBps;
    EXPECT_DOUBLE_EQ(r.busbw_GBps, 1.5 * r.algbw_GBps);
    EXPECT_FALSE(r.bytes_measured);
    EXPECT_DOUBLE_EQ(r.bytes_sent_per_rank, 1.5 * static_cast<double>(r.bytes));
    EXPECT_DOUBLE_EQ(r.bytes_recv_per_rank, 1.5 * static_cast<double>(r.bytes));
    ASSERT_GT(r.memcpy_GBps, 0.0);
    EXPECT_DOUBLE_EQ(to_json(r)["memcpy_GBps"].get<double>(), r.memcpy_GBps);
    // the row: backend shape size count type time(us) algbw busbw #wrong %memcpy vs-base
    std::vector<std::string> col;
    std::istringstream lines(p.text);
    for (std::string line; std::getline(lines, line) && col.empty();) {
      std::istringstream words(line);
      std::vector<std::string> w;
      for (std::string x; words >> x;) w.push_back(x);
      if (w.size() > 2 && w[0] == r.backend && w[2] == std::to_string(r.bytes)) col = w;
    }
    ASSERT_EQ(col.size(), 11u) << p.text;
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * r.busbw_GBps / r.memcpy_GBps);
    EXPECT_EQ(col[9], pct) << "busbw " << r.busbw_GBps << " GB/s, memcpy " << r.memcpy_GBps;
  }
  char avg[64];
  std::snprintf(avg, sizeof avg, "Avg bus bandwidth    : %.3f GB/s\n", busbw / 2);
  EXPECT_NE(p.text.find(avg), std::string::npos) << avg << "\n" << p.text;
}

}  // namespace
}  // namespace starring
