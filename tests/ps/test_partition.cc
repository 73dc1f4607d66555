// The slicer and the plan: ranges cover the buffer exactly once, range mode is balanced within
// one chunk, tensor mode keeps tensors whole (and is measurably unbalanced), chunks respect the
// chunk size and the buckets; roles from --servers; the ps options a worker gets from the command
// line.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/config.h"
#include "common/error.h"
#include "ps/partition.h"
#include "ps/ps_group.h"
#include "ps/ps_worker.h"
#include "ps_test_util.h"

namespace starring::ps {
namespace {

ParamLayout mlp_layout(const std::vector<int>& widths) {
  ParamLayout l;
  std::vector<std::size_t> off;
  std::size_t pos = 0;
  for (std::size_t k = 0; k + 1 < widths.size(); ++k) {
    off.push_back(pos);
    pos += static_cast<std::size_t>(widths[k] * widths[k + 1] + widths[k + 1]);
  }
  for (std::size_t k = off.size(); k-- > 0;) {
    l.add_at("w" + std::to_string(k), off[k], {widths[k + 1], widths[k]});
    l.add_at("b" + std::to_string(k), off[k] + static_cast<std::size_t>(widths[k] * widths[k + 1]),
             {widths[k + 1]});
  }
  return l;
}

// Every float of [0, total) is owned by exactly one range and pushed in exactly one chunk, and
// each chunk lies inside one range of the server it names.
void check_plan(const ParamLayout& l, const PsPlan& p, std::size_t chunk_bytes) {
  std::vector<int> owner(l.total(), -1), covered(l.total(), 0);
  for (const auto& r : p.ranges)
    for (std::size_t i = r.begin; i < r.end; ++i) {
      ASSERT_EQ(owner[i], -1) << "float " << i << " owned twice";
      owner[i] = r.server;
    }
  for (const auto& c : p.chunks) {
    ASSERT_GT(c.count, 0u);
    ASSERT_LE(c.count * sizeof(float), chunk_bytes);
    for (std::size_t i = c.begin; i < c.begin + c.count; ++i) {
      ++covered[i];
      ASSERT_EQ(owner[i], c.server) << "chunk crosses into another server's range at " << i;
    }
  }
  for (std::size_t i = 0; i < l.total(); ++i) {
    ASSERT_NE(owner[i], -1) << "float " << i << " owned by nobody";
    ASSERT_EQ(covered[i], 1) << "float " << i << " pushed " << covered[i] << " times";
  }
  // A tensor belongs to one bucket, and its chunks cover it.
  for (std::size_t t = 0; t < l.num_tensors(); ++t) {
    std::size_t n = 0;
    for (int c : p.chunks_of_tensor[t]) {
      const auto& ch = p.chunks[static_cast<std::size_t>(c)];
      EXPECT_EQ(ch.bucket, p.bucket_of_tensor[t]);
      const auto& ts = l.tensor(t);
      n += std::min(ch.begin + ch.count, ts.offset + ts.size) - std::max(ch.begin, ts.offset);
    }
    EXPECT_EQ(n, l.tensor(t).size) << "tensor " << t;
  }
}

TEST(PsPartition, RangeCoversOnceAndBalancesWithinOneChunk) {
  for (auto widths : std::vector<std::vector<int>>{{784, 256, 128, 10}, {23, 13, 7, 3}, {5, 1}}) {
    ParamLayout l = mlp_layout(widths);
    for (int s : {1, 2, 3, 4, 7}) {
      for (std::size_t chunk : {4ul, 7ul, 256ul, 1023ul, 4096ul, 4ul << 20}) {  // 7, 1023: not x4
        for (std::size_t bucket : {0ul, 1000ul, 25ul << 20}) {
          PsPlan p = make_plan(l, s, slice_by_range, chunk, bucket);
          check_plan(l, p, chunk);
          std::size_t lo = l.total(), hi = 0;
          for (int k = 0; k < s; ++k) {
            lo = std::min(lo, p.server_floats(k));
            hi = std::max(hi, p.server_floats(k));
          }
          EXPECT_LE((hi - lo) * sizeof(float), chunk) << "S=" << s;
          EXPECT_LE(hi - lo, 1u) << "range slicing is balanced to one float";
        }
      }
    }
  }
}

// A layout whose tensors leave a gap or overlap is refused (ParamLayout::validate) before it is
// cut into ranges: a gap is floats that no tensor names but some server would own. A validate that
// only refused overlaps (b >= pos instead of b == pos) passed every other test.
TEST(PsPartition, LayoutWithAGapOrAnOverlapIsRefused) {
  ParamLayout gap;
  gap.add("a", {4});
  gap.add_at("b", 6, {2});  // floats 4 and 5 belong to no tensor
  EXPECT_EQ(gap.total(), 8u);
  EXPECT_THROW(gap.validate(), Error);
  EXPECT_THROW(make_plan(gap, 2, slice_by_range, 4096, 0), Error);
  ParamLayout overlap;
  overlap.add("a", {4});
  overlap.add_at("b", 2, {4});  // floats 2 and 3 in both
  EXPECT_THROW(overlap.validate(), Error);
  ParamLayout fine;
  fine.add_at("b", 4, {2, 2});
  fine.add_at("a", 0, {4});  // out of order, contiguous: accepted
  EXPECT_NO_THROW(fine.validate());
  EXPECT_NO_THROW(make_plan(fine, 2, slice_by_range, 4096, 0));
  EXPECT_THROW(fine.add("z", {3, 0}), Error);  // a tensor of no floats
}

TEST(PsPartition, LargeTensorIsSplitAcrossServers) {
  ParamLayout l = mlp_layout({784, 256, 128, 10});
  PsPlan p = make_plan(l, 2, slice_by_range, 4 << 20, 25 << 20);
  // fc0.weight (784*256 floats) is most of the model: both servers own part of it.
  const std::size_t big = l.num_tensors() - 2;
  ASSERT_EQ(l.tensor(big).size, 784u * 256u);
  std::vector<int> servers;
  for (int c : p.chunks_of_tensor[big]) servers.push_back(p.chunks[c].server);
  EXPECT_NE(std::find(servers.begin(), servers.end(), 0), servers.end());
  EXPECT_NE(std::find(servers.begin(), servers.end(), 1), servers.end());
}

TEST(PsPartition, TensorModeKeepsTensorsWholeRoundRobin) {
  ParamLayout l = mlp_layout({784, 256, 128, 10});
  for (int s : {1, 2, 3}) {
    PsPlan p = make_plan(l, s, slice_by_tensor, 4096, 25 << 20);
    check_plan(l, p, 4096);
    for (std::size_t t = 0; t < l.num_tensors(); ++t)
      for (int c : p.chunks_of_tensor[t])
        EXPECT_EQ(p.chunks[c].server, static_cast<int>(t % static_cast<std::size_t>(s)));
  }
  // The naive placement is far from balanced on this model (that is why it is kept).
  PsPlan p2 = make_plan(l, 2, slice_by_tensor, 4096, 25 << 20);
  const double a = static_cast<double>(p2.server_floats(0)),
               b = static_cast<double>(p2.server_floats(1));
  EXPECT_GT(std::max(a, b) / std::min(a, b), 5.0);
}

TEST(PsPartition, BucketsFollowBackwardOrderAndNeverSplitATensor) {
  ParamLayout l = testing::test_layout();
  PsPlan p = make_plan(l, 2, slice_by_range, 256, 300);
  ASSERT_GT(p.tensors_of_bucket.size(), 1u);
  int expect = 0;
  for (const auto& b : p.tensors_of_bucket)
    for (int t : b) EXPECT_EQ(t, expect++);
  EXPECT_EQ(expect, static_cast<int>(l.num_tensors()));
  EXPECT_THROW(slicer_by_name("bogus"), ConfigError);
}

TEST(PsGroup, RolesFromServersOption) {
  auto g = make_ps_group("2", 6);
  EXPECT_EQ(g.worker_ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(g.server_ranks, (std::vector<int>{4, 5}));
  EXPECT_TRUE(g.is_dedicated_server(5));
  EXPECT_FALSE(g.is_dedicated_server(3));
  auto c = make_ps_group("colocated", 4);
  EXPECT_TRUE(c.colocated);
  EXPECT_EQ(c.num_workers(), 4);
  EXPECT_EQ(c.num_servers(), 4);
  EXPECT_FALSE(c.is_dedicated_server(0));
  EXPECT_THROW(make_ps_group("3", 3), ConfigError);
  EXPECT_THROW(make_ps_group("0", 3), ConfigError);
  EXPECT_THROW(make_ps_group("two", 3), ConfigError);
  try {
    make_ps_group("2", 2);
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("at least 3 ranks"), std::string::npos) << e.what();
  }
}

// What `starring train` and `bench` pass to a parameter-server worker (worker_options): every
// ps option of the command line, set away from its default, arrives as given. --overlap off,
// --bucket-mb and --ps-shared-memory off each read as its default passed every other test: the
// tests of ps/ set PsWorkerOptions directly, and shared memory left on moves the same bytes.
TEST(PsOptions, CommandLineOptionsReachTheWorker) {
  const std::vector<const char*> argv = {
      "train", "--backend",          "ps",  "--servers",      "colocated", "--consistency",
      "ssp",   "--staleness",        "5",   "--ps-partition", "tensor",    "--ps-chunk-bytes",
      "64",    "--ps-shared-memory", "off", "--bucket-mb",    "1",         "--overlap",
      "off",   "--timeout",          "7"};
  Config cfg;
  ASSERT_TRUE(parse_config("train", static_cast<int>(argv.size()), argv.data(), cfg, nullptr));
  const PsWorkerOptions o = worker_options(cfg.sync, nullptr);
  EXPECT_EQ(o.consistency, "ssp");
  EXPECT_EQ(o.staleness, 5);
  EXPECT_EQ(o.partition, "tensor");
  EXPECT_EQ(o.chunk_bytes, 64u);
  EXPECT_FALSE(o.shared_memory);
  EXPECT_EQ(o.bucket_mb, 1.0);
  EXPECT_FALSE(o.overlap);
  EXPECT_EQ(o.timeout.count(), 7.0);
  // And the defaults are other values, so each of these checks an option's way through.
  const PsWorkerOptions d = worker_options(Config().sync, nullptr);
  EXPECT_EQ(d.consistency, "bsp");
  EXPECT_NE(d.staleness, 5);
  EXPECT_EQ(d.partition, "range");
  EXPECT_NE(d.chunk_bytes, 64u);
  EXPECT_TRUE(d.shared_memory);
  EXPECT_NE(d.bucket_mb, 1.0);
  EXPECT_TRUE(d.overlap);
  EXPECT_NE(d.timeout.count(), 7.0);
}

}  // namespace
}  // namespace starring::ps
