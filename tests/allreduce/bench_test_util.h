// Shared by the bench harness tests (test_bench_harness.cc, test_bench_output.cc): a small
// bench configuration over the given --backends.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/config.h"

namespace starring::test {

inline Config bench_config(std::vector<std::string> backends) {
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

}  // namespace starring::test
