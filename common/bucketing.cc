#include "common/bucketing.h"

#include <algorithm>

namespace starring {

std::vector<Bucket> make_buckets(const ParamLayout& layout, double cap_bytes) {
  std::vector<Bucket> out;
  const std::size_t nt = layout.num_tensors();
  std::size_t i = 0;
  while (i < nt) {
    Bucket b;
    b.first_tensor = i;
    b.lo = layout.tensor(i).offset;
    b.hi = b.lo;
    for (; i < nt; ++i) {
      const TensorSpec& t = layout.tensor(i);
      if (i > b.first_tensor && (b.floats + t.size) * sizeof(float) > cap_bytes) break;
      b.lo = std::min(b.lo, t.offset);
      b.hi = std::max(b.hi, t.offset + t.size);
      b.floats += t.size;
    }
    b.end_tensor = i;
    out.push_back(b);
  }
  return out;
}

std::vector<std::size_t> bucket_of_tensor(const std::vector<Bucket>& buckets, std::size_t tensors) {
  std::vector<std::size_t> of(tensors, 0);
  for (std::size_t b = 0; b < buckets.size(); ++b)
    for (std::size_t t = buckets[b].first_tensor; t < buckets[b].end_tensor; ++t) of[t] = b;
  return of;
}

}  // namespace starring
