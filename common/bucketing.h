// Gradient buckets (fusion), shared by every backend so that --bucket-mb means the same thing for
// the ring and the parameter server: tensors, in backward order, are grouped into buckets of at
// most cap_bytes; a tensor is never split, and a tensor larger than the cap gets a bucket of its
// own. A bucket is the unit a backend starts synchronizing as soon as its last gradient exists.
#pragma once
#include <cstddef>
#include <vector>

#include "common/param_layout.h"

namespace starring {

struct Bucket {
  std::size_t first_tensor = 0, end_tensor = 0;  // [first, end) in backward order
  std::size_t lo = 0, hi = 0;                    // [lo, hi): the span of elements covered
  std::size_t floats = 0;                        // sum of the tensors' sizes
  bool contiguous() const { return hi - lo == floats; }
};

std::vector<Bucket> make_buckets(const ParamLayout& layout, double cap_bytes);

// bucket index of every tensor (by backward index).
std::vector<std::size_t> bucket_of_tensor(const std::vector<Bucket>& buckets, std::size_t tensors);

}  // namespace starring
