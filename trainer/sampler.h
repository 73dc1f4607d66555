// DistributedSampler with PyTorch semantics: each of `world` workers gets a disjoint shard of the
// dataset's indices; the order is a shuffle that is a function of (seed, epoch) only, so all
// workers agree on it and every epoch reshuffles (call set_epoch each epoch, as in PyTorch).
// Every worker gets the same number of batches: the shuffled order is truncated to
// floor(n / (world * batch)) * world * batch samples (the remainder is dropped, "drop_last"),
// then worker r takes positions r, r + world, r + 2*world, ...
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace starring {

class DistributedSampler {
 public:
  DistributedSampler(std::size_t n, int rank, int world, int batch, std::uint64_t seed,
                     bool shuffle = true);
  void set_epoch(int epoch);
  std::size_t batches_per_epoch() const;
  // Indices of batch b (0 <= b < batches_per_epoch()) of this worker for the current epoch.
  std::vector<std::size_t> batch(std::size_t b) const;
  const std::vector<std::size_t>& indices() const { return mine_; }  // this epoch, this worker

 private:
  std::size_t n_;
  int rank_, world_, batch_;
  std::uint64_t seed_;
  bool shuffle_;
  std::vector<std::size_t> mine_;
};

}  // namespace starring
