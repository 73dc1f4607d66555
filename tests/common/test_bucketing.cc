// make_buckets (common/bucketing.h), the grouping of tensors into buckets every backend shares:
// every tensor in exactly one bucket, in backward order, never split, within the cap (a tensor
// larger than the cap alone). BucketSync's use of it is tests/allreduce/test_bucket_sync.cc.
#include <gtest/gtest.h>

#include "common/bucketing.h"
#include "tests/mlp_layout.h"

namespace starring {
namespace {

TEST(Buckets, CoverEveryTensorOnceNeverSplitRespectCap) {
  ParamLayout l = starring::testing::mlp_layout();
  for (double cap : {1.0, 4096.0, 200000.0, 1e9}) {
    auto buckets = make_buckets(l, cap);
    std::size_t next_tensor = 0, next_elem = 0;
    for (const Bucket& b : buckets) {
      EXPECT_EQ(b.first_tensor, next_tensor);
      EXPECT_EQ(b.lo, next_elem);
      EXPECT_GT(b.end_tensor, b.first_tensor);
      if (b.end_tensor - b.first_tensor > 1) EXPECT_LE((b.hi - b.lo) * 4.0, cap);
      next_tensor = b.end_tensor;
      next_elem = b.hi;
    }
    EXPECT_EQ(next_tensor, l.num_tensors());
    EXPECT_EQ(next_elem, l.total());
  }
  EXPECT_EQ(make_buckets(l, 1.0).size(), l.num_tensors());  // one tensor per bucket
  EXPECT_EQ(make_buckets(l, 1e9).size(), 1u);
  // A bucket may fill its cap exactly: it is closed only before a tensor that would exceed it.
  const double first_two = (l.tensor(0).size + l.tensor(1).size) * 4.0;
  EXPECT_EQ(make_buckets(l, first_two).at(0).end_tensor, 2u);
  EXPECT_EQ(make_buckets(l, first_two - 4).at(0).end_tensor, 1u);
}

}  // namespace
}  // namespace starring
