// Helpers shared by the all-reduce tests: run a body on every rank in-process or under MPI, and
// the closed-form data.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "allreduce/ring_allreduce.h"
#include "allreduce/wire_codec.h"
#include "common/inproc_comm.h"
#include "common/mpi_comm.h"
#include "experiments/bench_harness.h"
#include "tests/mpi_world.h"

namespace starring::test {

// tests/mpi_world.h's, under the names the allreduce and GPU suites use (INPROC_ONLY and
// MPI_ONLY come from there too).
inline int mpi_world_size() { return ::starring::testing::world_size(); }
inline int mpi_world_rank() { return ::starring::testing::world_rank(); }

// Runs fn(comm_ptr) on n in-process ranks; rethrows the first failure.
inline void inproc(int n, const std::function<void(std::shared_ptr<Comm>)>& fn,
                   Seconds timeout = Seconds(30)) {
  InProcWorld world(n);
  std::vector<std::thread> ts;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      auto c = world.comm(r);
      c->set_timeout(timeout);
      try {
        fn(c);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!first) first = std::current_exception();
        }
        world.abort(e.what());
      }
    });
  for (auto& t : ts) t.join();
  if (first) std::rethrow_exception(first);
}

inline std::shared_ptr<Comm> mpi_world(Seconds timeout = Seconds(30)) {
  auto c = std::make_shared<MpiComm>(MPI_COMM_WORLD);
  c->set_timeout(timeout);
  return c;
}

inline std::vector<float> closed_form_input(int rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input_value(rank, i);
  return v;
}

// Number of elements of out that differ from expected_sum(n, i) * scale.
inline long count_wrong(const float* out, std::size_t count, int n, float scale) {
  long wrong = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (out[i] != expected_sum(n, i) * scale) ++wrong;
  return wrong;
}

// What the ring computes with a half-precision wire, element by element (ring_allreduce.h): chunk
// c's partial sum starts as rank c's input narrowed, each of ranks c+1 .. c+N-2 adds its float32
// input to the widened partial sum and narrows the result, and rank c+N-1 adds its input, scales
// and narrows once more; every rank ends with that value widened. inputs[r] is rank r's buffer.
// Exact, so a ring that narrowed anything else (an input before it is added, a result before it is
// scaled) differs from it, though within the tolerance of a wire format.
inline std::vector<float> half_ring_reference(const std::vector<std::vector<float>>& inputs,
                                              WireType w, float scale) {
  const int n = static_cast<int>(inputs.size());
  const std::size_t count = inputs.at(0).size();
  auto narrowed = [w](float x) {
    std::uint16_t h;
    encode(w, &x, &h, 1);
    decode(w, &h, &x, 1);
    return x;
  };
  std::vector<float> out(count);
  for (int c = 0; c < n; ++c) {
    for (std::size_t i = ring_chunk_begin(c, n, count); i < ring_chunk_begin(c + 1, n, count);
         ++i) {
      if (n == 1) {  // nothing travels: no narrowing
        out[i] = inputs[0][i] * scale;
        continue;
      }
      float partial = narrowed(inputs[c][i]);
      for (int k = 1; k < n - 1; ++k) partial = narrowed(inputs[(c + k) % n][i] + partial);
      out[i] = narrowed((inputs[(c + n - 1) % n][i] + partial) * scale);
    }
  }
  return out;
}

inline std::vector<std::size_t> test_counts(int n) {
  return {
      0,      1, 7, static_cast<std::size_t>(n > 1 ? n - 1 : 0), static_cast<std::size_t>(n + 1),
      1000003};
}

// Ring options with many segments per chunk and counts not divisible by the segment.
inline RingOptions small_segments() {
  RingOptions o;
  o.segment_bytes = 4096;
  o.window = 2;
  return o;
}

// `o` with the shared-memory path off: every byte goes over the Comm (the ring-p2p backend).
inline RingOptions over_comm(RingOptions o) {
  o.shared_memory = false;
  return o;
}

}  // namespace starring::test
