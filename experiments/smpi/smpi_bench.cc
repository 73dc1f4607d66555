// smpi_bench: the project's all-reduce engines timed in simulated time under SimGrid's SMPI.
//
// The same sources as `starring bench` use (built with smpicxx, see cmake/smpi.cmake): the ring
// all-reduce over MPI point-to-point (RingAllreduce over MpiComm, the `ring-p2p` data path of
// `starring bench`; no ShmRing, since simulated hosts share no memory) and the vendor baseline
// (make_mpi_allreducer, a blocking MPI_Allreduce, here SMPI's implementation with the collective
// algorithm its selector picks). The parameter server's own code is not here: its worker and
// server each run a communication thread, and SMPI ranks cannot start threads that call MPI; a
// single-threaded stand-in of its message pattern is (`--backends ps`, below).
//
// It takes `starring bench`'s options (parse_config("bench"): -b -e -f -n -w -c --backends
// --segment-bytes --compress --timeout --json); --backends is ring-p2p (or ring, the same here)
// and/or mpi, default both. For each size (-b .. -e, times -f) and each backend: fill the input
// with the bench's closed form input_value(rank, i), -w warm-up runs, a barrier, -n timed runs,
// then compare every element with expected_sum(N, i) exactly. Times are MPI_Wtime, i.e. SimGrid's
// simulated clock; the slowest rank's mean is the row's time. Rank 0 prints `starring bench`'s
// table (size count type time algbw busbw #wrong; busbw = algbw * 2(N-1)/N; "vs base" = busbw over
// MPI_Allreduce's) and, with --json, one JSON line per row (the bench schema plus "simulated").
//
// `--backends ps --servers S|colocated` (alone: its ranks are W workers and S servers, or N
// workers with a shard each) times the parameter server's message pattern instead, one push +
// pull of the buffer per iteration, since the real PsWorker/ServerLoop cannot run here: see
// experiments/smpi/ps_pattern.h. busbw = bytes through the busiest link per second, as in
// `starring bench`: algbw * max(1, W/S), co-located algbw * 2(W-1)/W.
//
// Two adaptations, both options rather than code paths: MpiComm is asked for MPI_THREAD_SINGLE
// (SMPI provides no more, and this program has one thread), and the ring's idle policy spins
// (RingOptions::spin_us) instead of backing off, because a back-off sleep here becomes a simulated
// sleep (smpicxx maps nanosleep to smpi_nanosleep) that would delay the ring in simulated time;
// each MPI_Test that finds nothing advances the simulated clock by smpi/test instead.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "allreduce/ring_allreduce.h"
#include "allreduce/wire_codec.h"
#include "common/blas_kernels.h"
#include "common/config.h"
#include "common/error.h"
#include "common/mpi_comm.h"
#include "experiments/bench_harness.h"
#include "experiments/smpi/ps_pattern.h"
#include "ps/ps_group.h"

namespace starring {

// common/config_check.cc's --threads limit: this build has no OpenBLAS (nor blas_kernels.cc), and
// no compute to give threads to, so no limit.
int blas_max_threads() { return 0; }

namespace {

constexpr const char* kUsage =
    "usage: smpirun ... smpi_bench.so [starring bench options: -b MIN -e MAX -f FACTOR -n ITERS\n"
    "       -w WARMUP -c 0|1 --backends ring-p2p,mpi --segment-bytes B --compress none|fp16|bf16\n"
    "       --timeout S --json], or --backends ps --servers S [--ps-chunk-bytes B]\n";

// `starring bench`'s own options (parse_config), restricted to what runs here.
Config parse_args(int argc, char** argv, bool leader) {
  Config cfg;
  if (!parse_config("bench", argc, argv, cfg, leader ? &std::cout : nullptr)) std::exit(0);
  STARRING_CONFIG_CHECK(cfg.bench.mode == "bandwidth", "smpi_bench: --mode ", cfg.bench.mode,
                        " is not simulated (bandwidth only)\n", kUsage);
  if (cfg.bench.backends.empty()) cfg.bench.backends = {"ring-p2p", "mpi"};
  const auto& bs = cfg.bench.backends;
  STARRING_CONFIG_CHECK(std::find(bs.begin(), bs.end(), "ps") == bs.end() || bs.size() == 1,
                        "smpi_bench: --backends ps runs alone (its ranks are workers and "
                        "servers)\n",
                        kUsage);
  for (auto& b : cfg.bench.backends) {
    if (b == "ring") b = "ring-p2p";  // simulated hosts share no memory: the ring is ring-p2p
    STARRING_CONFIG_CHECK(b == "ring-p2p" || b == "mpi" || b == "ps", "smpi_bench: backend '", b,
                          "' is not simulated (ring-p2p, mpi and ps are)\n", kUsage);
  }
  return cfg;
}

std::unique_ptr<Allreducer> make_engine(const std::string& name, std::shared_ptr<Comm> comm,
                                        const SyncConfig& s) {
  if (name == "mpi") return make_mpi_allreducer(comm, MpiMode::kBlocking, Seconds(s.timeout_s));
  RingOptions opt;
  opt.segment_bytes = s.segment_bytes;
  opt.wire = parse_wire_type(s.compress);
  opt.timeout = Seconds(s.timeout_s);
  opt.shared_memory = false;  // the MPI point-to-point path (ring-p2p)
  opt.spin_us = 1 << 30;      // never back off into a (simulated) sleep: see the top
  return make_ring_allreducer(std::move(comm), opt);
}

struct Row {
  std::string engine;
  std::size_t bytes = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  long wrong = 0;
  int workers = 0, servers = 0;  // ps: W and S; all-reduce: np and 0
  bool colocated = false;        // ps: a shard in every worker
  std::size_t chunk_bytes = 0;   // ps: --ps-chunk-bytes
};

// input_value(w, i) depends on i only through its phase (closed_form_phase(i, 61)), so
// expected_sum(n, i) is a table of 61 values: the check costs O(count) per rank instead of
// O(count * n) (all ranks share one core).
const ClosedForm kForm{};

// What one timed operation is on this rank: its input is input_value(input_of, i), and when
// `checked` its result must be expected_sum(summed, i) (a parameter server's rank has none).
struct OpRole {
  int input_of = 0, summed = 1;
  bool checked = true;
};

// One size of one operation; every rank takes part, rank 0's return value is the row (time,
// algbw and #wrong; the caller sets busbw and the roles).
Row measure(const std::string& name, const std::function<void(const float*, float*)>& op,
            const OpRole& role, MPI_Comm world, const BenchConfig& b, std::size_t count) {
  std::vector<float> in(count), out(count, 0.0f);
  for (std::size_t i = 0; i < count; ++i) in[i] = input_value(role.input_of, i);
  for (int i = 0; i < b.warmup; ++i) op(in.data(), out.data());
  std::fill(out.begin(), out.end(), 0.0f);
  CHECK_MPI(MPI_Barrier(world));
  const double t0 = MPI_Wtime();
  for (int i = 0; i < b.iters; ++i) op(in.data(), out.data());
  double t = (MPI_Wtime() - t0) / b.iters, t_max = 0;
  long wrong = 0, wrong_all = 0;
  const std::vector<float> expected = kForm.sums_by_phase(role.summed);
  if (b.check && role.checked)
    for (std::size_t i = 0; i < count; ++i) wrong += out[i] != expected[kForm.phase(i)];
  CHECK_MPI(MPI_Reduce(&t, &t_max, 1, MPI_DOUBLE, MPI_MAX, 0, world));
  CHECK_MPI(MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, world));
  Row r{name, count * sizeof(float), t_max * 1e6, 0, 0, wrong_all};
  r.algbw = t_max > 0 ? r.bytes / t_max / 1e9 : 0;
  return r;
}

void print_row(const Row& r, int n, const Row* base, bool json) {
  char vs[16] = "";
  if (base && base != &r && base->busbw > 0)
    std::snprintf(vs, sizeof vs, "%.2fx", r.busbw / base->busbw);
  std::printf("   %-10s %12zu %12zu %6s %11.1f %9.2f %9.2f %7ld %8s %8s\n", r.engine.c_str(),
              r.bytes, r.bytes / sizeof(float), "float", r.time_us, r.algbw, r.busbw, r.wrong, "",
              vs);
  if (json) {
    nlohmann::json j{
        {"bench", r.engine == "ps" ? "pushpull" : "allreduce"},
        {"backend", r.engine},
        {"np", n},
        {"workers", r.workers},
        {"servers", r.colocated ? nlohmann::json("colocated") : nlohmann::json(r.servers)},
        {"size", r.bytes},
        {"count", r.bytes / 4},
        {"type", "float"},
        {"time_us", r.time_us},
        {"algbw_GBps", r.algbw},
        {"busbw_GBps", r.busbw},
        {"wrong", r.wrong},
        {"bytes_measured", false},
        {"simulated", true}};
    if (r.engine == "ps") j["ps_chunk_bytes"] = r.chunk_bytes;
    std::printf("%s\n", j.dump().c_str());
  }
}

int run(int argc, char** argv) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const bool leader = rank == 0;
  const Config cfg = parse_args(argc, argv, leader);
  const BenchConfig& b = cfg.bench;
  // SMPI provides MPI_THREAD_SINGLE; this program never calls MPI from a second thread.
  auto comm = std::make_shared<MpiComm>(MPI_COMM_WORLD, MPI_THREAD_SINGLE);
  comm->set_timeout(Seconds(cfg.sync.timeout_s));
  const int n = comm->size();
  const bool ps = b.backends.front() == "ps";
  const ps::PsGroup group = ps ? ps::make_ps_group(cfg.sync.servers, n) : ps::PsGroup{};
  std::vector<std::unique_ptr<Allreducer>> engines;
  if (!ps)
    for (const auto& e : b.backends) engines.push_back(make_engine(e, comm, cfg.sync));
  if (leader) {
    if (ps)
      std::printf(
          "#\n# smpi_bench: parameter-server push + pull of float32 (the message "
          "pattern), %d workers, %d %s, simulated time\n",
          group.num_workers(), group.num_servers(),
          group.colocated ? "co-located shards" : "servers");
    else
      std::printf(
          "#\n# smpi_bench: all-reduce of float32, sum over ranks, np %d, simulated "
          "time\n",
          n);
    std::printf("#  %-10s %12s %12s %6s %11s %9s %9s %7s %8s %8s\n", "backend", "size", "count",
                "type", "time(us)", "algbw", "busbw", "#wrong", "", "vs base");
    std::printf("#  %-10s %12s %12s %6s %11s %9s %9s %7s %8s %8s\n", "", "(B)", "(elements)", "",
                "", "(GB/s)", "(GB/s)", "", "", "");
  }
  long wrong = 0;
  for (std::size_t bytes = b.min_bytes;; bytes *= b.factor) {
    std::vector<Row> rows;
    const std::size_t count = bytes / 4;
    for (std::size_t e = 0; e < engines.size(); ++e) {
      Allreducer& engine = *engines[e];
      rows.push_back(measure(
          b.backends[e], [&](const float* in, float* out) { engine.run(in, out, count, 1.0f); },
          OpRole{comm->rank(), n, true}, comm->mpi_comm(), b, count));
      rows.back().busbw = rows.back().algbw * 2.0 * (n - 1) / n;
      rows.back().workers = n;
    }
    if (ps) {
      PsPattern pattern(comm->mpi_comm(), group, cfg.sync.ps_chunk_bytes, count);
      const int w = group.worker_index(comm->rank()), nw = group.num_workers();
      rows.push_back(measure(
          "ps", [&](const float* in, float* out) { pattern.run(in, out); },
          OpRole{std::max(w, 0), nw, w >= 0}, comm->mpi_comm(), b, count));
      rows.back().busbw =
          rows.back().algbw *
          (group.colocated ? 2.0 * (nw - 1) / nw : std::max(1.0, 1.0 * nw / group.num_servers()));
      rows.back().workers = nw;
      rows.back().servers = group.num_servers();
      rows.back().colocated = group.colocated;
      rows.back().chunk_bytes = cfg.sync.ps_chunk_bytes;
    }
    const Row* base = nullptr;
    for (const auto& r : rows)
      if (r.engine == "mpi") base = &r;
    for (const auto& r : rows) {
      wrong += r.wrong;
      if (leader) print_row(r, n, base, b.json);
    }
    if (leader) std::fflush(stdout);
    if (bytes > b.max_bytes / b.factor) break;
  }
  if (leader) {
    std::printf("#  Out of bounds values : %ld %s\n#\n", wrong, wrong ? "FAILED" : "OK");
    std::fflush(stdout);
  }
  return wrong ? 1 : 0;
}

}  // namespace
}  // namespace starring

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
  int rc = 0;
  try {
    rc = starring::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "smpi_bench: %s\n", e.what());
    rc = 2;
  }
  MPI_Finalize();
  return rc;
}
