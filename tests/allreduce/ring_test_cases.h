// The checks test_ring.cc and test_ring_mpi.cc run on an all-reduce engine, in-process or under
// mpirun: the closed form for every count and scale, a silent peer's timeout and its census.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "common/error.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/scheduling_lag.h"

namespace starring::test {

// Every count x in-place/out-of-place x sum/average/a caller's own scale on one rank of `comm`.
// The own scale (0.25: exact on the closed form) is what a single rank must apply too, where the
// average's 1/N is 1: the ring's one-rank path dropped it and every case here still passed.
// `large`: the largest count in place of test_counts' own.
inline void check_engine(Allreducer& eng, Comm& comm, std::size_t large = 0) {
  const int n = comm.size(), r = comm.rank();
  std::vector<std::size_t> counts = test_counts(n);
  if (large) counts.back() = large;
  for (std::size_t count : counts) {
    auto in = closed_form_input(r, count);
    for (float scale : {1.0f, 1.0f / n, 0.25f}) {
      std::vector<float> out(count, -1.0f);
      eng.run(in.data(), out.data(), count, scale);
      EXPECT_EQ(count_wrong(out.data(), count, n, scale), 0)
          << eng.name() << " out-of-place, ranks " << n << " count " << count << " rank " << r;
      std::vector<float> inplace = in;
      eng.run(inplace.data(), inplace.data(), count, scale);
      EXPECT_EQ(count_wrong(inplace.data(), count, n, scale), 0)
          << eng.name() << " in-place, ranks " << n << " count " << count << " rank " << r;
      // Buffers that are not 16-byte aligned (a bucket starts anywhere in the flat buffer).
      std::vector<float> in1(count + 1), out1(count + 1, -1.0f);
      std::copy(in.begin(), in.end(), in1.begin() + 1);
      eng.run(in1.data() + 1, out1.data() + 1, count, scale);
      EXPECT_EQ(count_wrong(out1.data() + 1, count, n, scale), 0)
          << eng.name() << " unaligned, ranks " << n << " count " << count << " rank " << r;
    }
  }
}

// Whether a census clause ("; ranks 1 and 3 did not ...", "; rank 3 did not ...", or "...,
// ranks 0 and 3 did not ...") lists rank r among the ranks that did not time out.
inline bool census_names_quiet(const std::string& msg, int r) {
  const std::size_t end = msg.find(" did not");
  if (end == std::string::npos) return false;
  const std::size_t start = msg.rfind("rank", end);  // "rank " or "ranks "
  if (start == std::string::npos) return false;
  std::istringstream list(msg.substr(start, end - start));
  std::string word;
  while (list >> word) {
    if (!word.empty() && word.back() == ',') word.pop_back();
    if (word == std::to_string(r)) return true;
  }
  return false;
}

// A silent peer: the others fail with TimeoutError naming themselves and the peer, in time: not
// before the timeout, and not far beyond it plus how late this process ran meanwhile (the
// control, tests/scheduling_lag.h: under TSan on a loaded machine, 12.9 s against 7 s once).
inline void expect_timeout(Comm& c, Allreducer& eng, int silent, double timeout_s) {
  if (c.rank() == silent) return;
  auto in = closed_form_input(c.rank(), 64 * c.size());
  std::vector<float> out(in.size());
  starring::testing::SchedulingLag lag;
  auto t0 = std::chrono::steady_clock::now();
  try {
    eng.run(in.data(), out.data(), in.size(), 1.0f);
    ADD_FAILURE() << "all-reduce with a silent peer returned";
  } catch (const TimeoutError& e) {
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double late = lag.stop();
    std::string msg = e.what();
    EXPECT_NE(msg.find(c.where() + ": timeout after"), std::string::npos) << msg;
    if (eng.name() == "ring" && c.rank() == (silent + 1) % c.size()) {
      EXPECT_NE(msg.find("from rank " + std::to_string(silent)), std::string::npos) << msg;
      // and the step it waits in: its first receive, from the peer that never sent (the
      // shared-memory ring, used under mpirun, says how many segments it still waits for)
      if (msg.find("shared-memory ring") == std::string::npos)
        EXPECT_NE(msg.find("ring all-reduce step 0, recv from rank " + std::to_string(silent)),
                  std::string::npos)
            << msg;
    }
    // The census names the silent rank on every rank, not only on its successor: among those
    // that did not time out ("rank 3 did not", or with a slow one beside it "ranks 0 and 3 did
    // not", which under TSan at load 5 a 0.3 s timeout gave).
    EXPECT_TRUE(census_names_quiet(msg, silent)) << msg;
    EXPECT_GE(waited, timeout_s) << "timeout fired early";
    EXPECT_LT(waited, timeout_s * (c.size() + 1) + 5 + late)
        << "timeout fired far too late; this process ran " << late << " s late meanwhile";
  }
}

}  // namespace starring::test
