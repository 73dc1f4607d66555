// make_buckets (common/bucketing.h), the grouping of tensors into buckets every backend shares:
// every tensor in exactly one bucket, in backward order, never split, within the cap (a tensor
// larger than the cap alone). BucketSync's use of it is tests/allreduce/test_bucket_sync.cc.
#include <gtest/gtest.h>

#include "common/bucketing.h"

namespace starring {
namespace {

// An MLP-like layout: tensors listed in backward order, laid out in that order (the one
// test_bucket_sync.cc trains).
ParamLayout test_layout() {
  ParamLayout l;
  l.add("fc3.bias", {10});
  l.add("fc3.weight", {10, 128});
  l.add("fc2.bias", {128});
  l.add("fc2.weight", {128, 256});
  l.add("fc1.bias", {256});
  l.add("fc1.weight", {256, 784});
  l.validate();
  return l;
}

TEST(Buckets, CoverEveryTensorOnceNeverSplitRespectCap) {
  ParamLayout l = test_layout();
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
