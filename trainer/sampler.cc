// DistributedSampler (see sampler.h). Each epoch every worker builds the same permutation of
// [0, n) with a Fisher-Yates shuffle driven by SplitMix64 seeded from (seed, epoch) -- portable,
// unlike std::shuffle, so ranks built by different compilers still agree -- keeps the first
// floor(n / (world * batch)) * world * batch positions, and takes every world-th position
// starting at its rank. Shards are thus disjoint, cover the kept positions exactly once, and
// hold the same number of whole batches on every worker; at most world * batch - 1 samples per
// epoch are dropped, and a different permutation each epoch drops different ones.
#include "trainer/sampler.h"

#include <numeric>

#include "common/error.h"
#include "common/rng.h"

namespace starring {

DistributedSampler::DistributedSampler(std::size_t n, int rank, int world, int batch,
                                       std::uint64_t seed, bool shuffle)
    : n_(n), rank_(rank), world_(world), batch_(batch), seed_(seed), shuffle_(shuffle) {
  STARRING_CHECK(world > 0 && rank >= 0 && rank < world, "sampler: rank ", rank,
                 " outside a world of ", world);
  STARRING_CONFIG_CHECK(batch > 0, "sampler: batch must be > 0 (got ", batch, ")");
  set_epoch(0);
}

std::size_t DistributedSampler::batches_per_epoch() const {
  return n_ / (static_cast<std::size_t>(world_) * batch_);
}

void DistributedSampler::set_epoch(int epoch) {
  std::vector<std::size_t> order(n_);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (shuffle_ && n_ > 1) {
    SplitMix64 rng(mix(seed_, static_cast<std::uint64_t>(epoch)));
    for (std::size_t i = n_ - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  }
  const std::size_t kept = batches_per_epoch() * world_ * batch_;
  mine_.clear();
  mine_.reserve(kept / world_);
  for (std::size_t p = static_cast<std::size_t>(rank_); p < kept; p += world_)
    mine_.push_back(order[p]);
}

std::vector<std::size_t> DistributedSampler::batch(std::size_t b) const {
  STARRING_CHECK(b < batches_per_epoch(), "sampler: batch ", b, " of ", batches_per_epoch());
  auto first = mine_.begin() + static_cast<std::ptrdiff_t>(b * batch_);
  return std::vector<std::size_t>(first, first + batch_);
}

}  // namespace starring
