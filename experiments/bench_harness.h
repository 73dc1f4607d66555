// The `starring bench` harness: one driver for every backend, modelled on nccl-tests.
//
// A backend joins the bench by adding a small BenchOp adapter and registering it by name with a
// static BenchOpRegistrar in the adapter's file (experiments/bench_allreduce_ops.cc,
// experiments/bench_ps.cc), the same way backends join the trainer's registry in
// experiments/register_<name>.cc:
//
//   static starring::BenchOpRegistrar bench_reg("ring", [](const BenchOpContext& ctx) {
//     return std::make_unique<AllreduceBenchOp>("ring", ctx);
//   });
//
// For each size (-b .. -e, times -f) and each backend named in --backends, the harness, on every
// rank of the world:
//   1. fills the input with the closed form input_value(worker, i) on worker ranks (ClosedForm);
//   2. calls op.prepare(input, count) (not timed), then op.run() -w times (warm-up);
//   3. barrier, then op.run() -n times, timed; the time is the slowest worker's mean;
//   4. with -c, one more op.run() (untimed, after op.clear_result() on workers, as nccl-tests
//      checks a run of its own into a zeroed buffer), then op.result(out, count) on workers, and
//      compares every element against
//      expected_sum(workers, i) exactly: the values are small integers, so any order of float
//      additions gives the same bits, and a wrong count of 0 is a real check (with --compress
//      and many workers, a smaller closed form whose sums stay exact on the wire: ClosedForm);
//   5. reads op.counters() before/after the timed loop for the bytes moved per rank.
// Rank 0 prints a line with the parameters (nccl-tests' "minBytes ... iters ... validation"), then
// one row per size: shape (W=workers[,S=servers|,co]) size count type time(us) algbw busbw #wrong
// (N/A with -c 0) %memcpy vs base (only against a base row of the same shape, else "-"), with
// algbw = bytes / time and busbw = algbw * op.bus_factor(), and a JSON line per row with --json
// (fields listed in docs/REFERENCE.md, "The bench table and the output files"), then a footer per
// backend.
//
// The semantics every op implements is the SUM over workers (no 1/N scaling), out of place.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/config.h"

namespace starring {

class Device;

struct BenchOpContext {
  const Config& cfg;
  std::shared_ptr<Comm> world;  // every rank of the job
  Device* device = nullptr;     // this rank's compute device (GPU ops use it); may be null
};

class BenchOp {
 public:
  virtual ~BenchOp() = default;

  // The JSON "bench" field: "allreduce" (ring, mpi, nccl) or "pushpull" (ps).
  virtual std::string kind() const { return "allreduce"; }
  // False on ranks that hold no data (dedicated parameter servers): they get prepare(nullptr, n)
  // and run() the same number of times as workers, and serve each iteration.
  virtual bool is_worker() const { return true; }
  // This rank's index among the workers (0..workers()-1); ignored on non-workers.
  virtual int worker_index() const = 0;
  virtual int workers() const = 0;
  // The JSON "servers" field: a count, "colocated", or 0 for all-reduce.
  virtual nlohmann::json servers() const { return 0; }
  // busbw = algbw * bus_factor(). All-reduce: 2(W-1)/W. PS: say in your adapter what it means
  // (e.g. bytes through the busiest link divided by the buffer size).
  virtual double bus_factor() const = 0;

  // Not timed. `input` (count floats, host memory) stays valid and unchanged until the next
  // prepare(); null on non-workers. Device ops upload it here; host ops may keep the pointer.
  virtual void prepare(const float* input, std::size_t count) = 0;
  // Timed: one out-of-place sum over workers of the prepared input. Called on every rank.
  virtual void run() = 0;
  // Not timed, workers only: copies the last run()'s result (count floats) to host memory.
  virtual void result(float* out) = 0;
  // Not timed, workers only: sets the result to zeros before the check's own run (-c), so that
  // the run must write every element: a result left by an earlier run would read as right.
  virtual void clear_result() = 0;
  // Buffers of the message's size (or fractions of one) this op keeps in host memory on this
  // rank (a worker's result: the ring's and MPI's output, the parameter server's parameters; a
  // server shard's parameters and sums), besides a worker's input and result, which the harness
  // holds; 0 where they live on the device (nccl). For the check that a host holds its ranks'
  // buffers (experiments/bench_agreement.h).
  virtual double host_buffers() const { return 1; }

  // Bytes/messages this rank has moved so far through a counting transport (Comm counters);
  // nullopt when the transport is opaque (MPI_Allreduce, NCCL): the harness then reports the
  // ring's theoretical bytes and marks the row "bytes_measured": false.
  virtual std::optional<CommCounters> counters() const { return std::nullopt; }
  // Extra JSON fields for a row (e.g. ps: "server_bytes_in"/"server_bytes_out" per server per
  // iteration). Called on EVERY rank after the timed loop of each size (so an op may gather
  // over its comm); only rank 0's return value is used.
  virtual nlohmann::json extra_fields(std::size_t /*count*/, int /*iters*/) {
    return nlohmann::json::object();
  }
};

using BenchOpFactory = std::function<std::unique_ptr<BenchOp>(const BenchOpContext&)>;

// The table of bench adapters by name (static registration only, like BackendRegistry).
void register_bench_op(const std::string& name, BenchOpFactory f);
std::unique_ptr<BenchOp> make_bench_op(const std::string& name, const BenchOpContext& ctx);
std::vector<std::string> bench_op_names();

struct BenchOpRegistrar {
  BenchOpRegistrar(const std::string& name, BenchOpFactory f) {
    register_bench_op(name, std::move(f));
  }
};

// Where index i sits in a closed form of period p: a mixed hash of i, reduced mod p. A form that
// depended on i mod p would read a chunk shifted by a multiple of p elements (a wrong offset in a
// backend) as right; hashed, two chunks agree only by chance, element by element.
inline std::size_t closed_form_phase(std::size_t i, std::size_t p) {
  std::uint64_t x = (static_cast<std::uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<std::size_t>(x % p);
}

// The closed-form data: worker w's input at index i, and the exact sum over `workers` workers.
// Values are small integers (|v| < 2^11) so every partial sum is exact in float32. They depend on
// i only through its phase, closed_form_phase(i, 61).
inline float input_value_at_phase(int worker, std::size_t phase) {
  return static_cast<float>(
      static_cast<int>((phase * 7 + static_cast<std::size_t>(worker) * 13) % 61) - 30 + worker);
}
inline float input_value(int worker, std::size_t i) {
  return input_value_at_phase(worker, closed_form_phase(i, 61));
}
inline float expected_sum(int workers, std::size_t i) {
  float s = 0;
  for (int w = 0; w < workers; ++w) s += input_value(w, i);
  return s;
}

// The closed form of one bench run. period 61: input_value above. A half-precision wire
// (--compress) carries every partial sum narrowed, and its integers are exact only up to 256
// (bf16) or 2048 (fp16): input_value's partial sums pass them from 20 (bf16) or 64 (fp16) workers
// on, where a correct ring would read as wrong. There a smaller form is used,
// value = (phase(i, p) + 2w) mod p - (p - 1) / 2 with the largest prime p (at most 59) that keeps
// workers x (p - 1) / 2 within the limit (p = 1, all zeros, past `limit` workers: nothing left to
// check).
struct ClosedForm {
  int period = 61;
  std::size_t phase(std::size_t i) const {
    return closed_form_phase(i, static_cast<std::size_t>(period));
  }
  float value_at_phase(int worker, std::size_t ph) const {
    if (period == 61) return input_value_at_phase(worker, ph);
    return static_cast<float>(static_cast<int>((ph + 2 * static_cast<std::size_t>(worker)) %
                                               static_cast<std::size_t>(period)) -
                              (period - 1) / 2);
  }
  float value(int worker, std::size_t i) const { return value_at_phase(worker, phase(i)); }
  float sum(int workers, std::size_t i) const {
    float s = 0;
    for (int w = 0; w < workers; ++w) s += value(w, i);
    return s;
  }
  // sum(workers, i) for every phase: the expected result is sums[phase(i)].
  std::vector<float> sums_by_phase(int workers) const {
    std::vector<float> t(static_cast<std::size_t>(period), 0.0f);
    for (std::size_t ph = 0; ph < t.size(); ++ph)
      for (int w = 0; w < workers; ++w) t[ph] += value_at_phase(w, ph);
    return t;
  }
};
// The form for `workers` workers and the --compress setting ("none", "fp16", "bf16").
ClosedForm closed_form_for(int workers, const std::string& compress);

// One measured row (what is printed and written as JSON).
struct BenchRow {
  std::string backend, kind;
  int np = 0, workers = 0;
  nlohmann::json servers = 0;
  int ranks = 0;  // the ranks the op ran on: W, plus S dedicated servers (JSON "ranks_used")
  // busbw / busbw of the base backend's row of this size (1 in the base's own), only where the two
  // have the same shape (workers and ranks): another shape's busbw counts other links and its
  // time other ranks. JSON null where not compared.
  std::optional<double> vs_base;
  std::string base;  // the base backend's name
  std::size_t bytes = 0, count = 0;
  double time_us = 0, algbw_GBps = 0, busbw_GBps = 0;
  long wrong = 0;
  bool checked = true;  // false with -c 0: `wrong` is then unknown ("N/A", JSON null)
  int iters = 0, warmup = 0;
  double memcpy_GBps = 0;
  double bytes_sent_per_rank = 0, bytes_recv_per_rank = 0;
  bool bytes_measured = true;
  nlohmann::json extra = nlohmann::json::object();
};
nlohmann::json to_json(const BenchRow& row);
// The row's shape as the table prints it: "W=4" (all-reduce), "W=3,S=1" (dedicated servers),
// "W=4,co" (co-located servers).
std::string shape_label(const BenchRow& row);

// Runs the whole bench on every rank of `world` (cfg.bench: sizes, iterations, backends) and
// prints/writes on rank 0. Returns the rows (complete on rank 0). Throws on errors. `checked`
// runs on every rank once the options are checked and every backend is made, before the table
// (`starring bench`: its one-process note, after any refusal rather than before it).
std::vector<BenchRow> run_bench_harness(const Config& cfg, std::shared_ptr<Comm> world,
                                        Device* device, const std::function<void()>& checked = {});

// This machine's memcpy bandwidth in GB/s (counted as bytes copied / time; one read + one write
// per byte), measured on a buffer of `bytes` (at least 1 MiB).
double measure_memcpy_GBps(std::size_t bytes);

// The last size the bench's loop reaches: -b times -f while that stays within -e.
std::size_t largest_bench_size(const BenchConfig& bc);

// Collective over `world`: on rank 0, the job's hosts as `train`'s summary judges them, for every
// row of a bench (empty elsewhere): "hosts", "cores" (the CPUs of rank 0's host its ranks may
// use), "oversubscribed" host by host (and "oversubscribed_where").
nlohmann::json job_hosts(Comm& world, int tag);

// The bench's %memcpy reference is measured on max(-e, this): out of the CPU caches whatever -e
// is, so it is memory bandwidth and the same figure in every run (measured at -e = 2 MiB, it read
// the cache's copy speed: 63 GB/s here against 20-26 GB/s from 16 MiB up).
inline constexpr std::size_t kMemcpyReferenceBytes = std::size_t{128} << 20;

}  // namespace starring
