// `starring bench --mode overlap`: does a backend's communication progress while the training
// thread computes? Modelled on the OSU micro-benchmarks' non-blocking collective tests
// (osu_iallreduce: post MPI_Iallreduce, compute for about the pure communication time, MPI_Wait),
// but driven through the GradientSync seam exactly as the trainer drives it, so it measures the
// backends' real communication threads:
//
//   scripts/mpirun.sh -np 2 build/bin/starring bench --mode overlap
//       --backends ring,mpi,ps-colocated -b 1M -e 64M [--compute sleep,busy,serial]
//       [--overlap off] [--json]                                      (one command line)
//
// For each size and backend, every rank asks the backend registry for the backend (as `starring
// train` does: `ps` uses --servers, dedicated server ranks serve; `ps-colocated` is `ps` with
// --servers colocated; `mpi-nothread` is the thread-less reference below; NAME@N runs it on
// ranks 0..N-1 only), and each worker starts it on a ParamLayout of a few tensors summing to
// the size. One iteration is: barrier, begin_step, then
//   t_comm     tensor_ready(every tensor), wait_params(last..first), flush   (no compute)
//   t_compute  the compute alone
//   t_total    tensor_ready(every tensor), compute, wait_params(last..first), flush
// As in OSU, -w warm-up and -n timed iterations of the sync alone come first: the slowest
// worker's median of them is the compute's target (OSU sets its dummy compute to the pure
// communication latency). Compute kinds:
//   sleep   the training thread sleeps: the host is idle, as while a GPU kernel runs;
//   busy    the training thread multiplies 128x128 matrices (OpenBLAS, --threads) for that long:
//           CPU training, where the communication thread competes for the cores;
//   serial  the control: the sleep, but the sync is posted only AFTER it (compute, tensor_ready,
//           flush), so there is nothing to overlap and the measure must report ~0.
// The -n timed iterations interleave the measurements (comm, then each kind's compute alone and
// overlapped) so that a loaded machine slows them alike. Each time is the median over the
// iterations (OSU takes the mean; the median keeps a burst of other jobs on a shared machine
// from deciding a row), then the mean over workers (as OSU averages over ranks), and
//   overlap % = overlap_percent(t_comm, t_compute, t_total), OSU's formula (below).
// Rank 0 prints `size backend compute t_comm(us) t_compute(us) t_total(us) overlap(%)` rows,
// a JSON line per row with --json, and a footer.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/config.h"
#include "common/gradient_sync.h"

namespace starring {

class Device;

// OSU's overlap, from the OSU micro-benchmarks' print_stats_nbc (mpi/collective/osu_coll.c):
//   overlap = max(0, 100 - ((overall_time - (cpu_time - test_time)) / comm_time) * 100)
// where overall_time is post + compute + wait, cpu_time - test_time the dummy compute, and
// comm_time the pure communication latency. That is 100 * (1 - (t_total - t_compute) / t_comm):
// the share of the communication time that the compute hid. t_total = max(t_comm, t_compute)
// with t_compute >= t_comm gives 100; t_total = t_comm + t_compute gives 0. Here it is also
// clamped to <= 100 (a t_total below t_compute is noise), and 0 when t_comm <= 0. One difference:
// OSU's t_compute is the compute time measured inside the overlapped loop (its compute spins
// for a wall-clock target, so the two agree); ours is a fixed amount of work measured alone, so a
// compute slowed down by the communication thread counts against the overlap.
double overlap_percent(double t_comm, double t_compute, double t_total);

// The tensor sizes (floats, backward order) of the benchmark's ParamLayout for `count` floats:
// up to four tensors, the last one taking the remainder; all non-empty, summing to count.
std::vector<std::size_t> overlap_tensor_sizes(std::size_t count);

// One worker's medians over the timed iterations (seconds). Per compute kind k: t_compute[k],
// t_total[k] and t_inside[k] (the compute's own time inside the overlapped iteration).
struct OverlapSample {
  double t_comm = 0;
  std::vector<double> t_compute, t_total, t_inside;
};

struct OverlapRow {
  std::string backend, compute;
  int np = 0, workers = 0, tensors = 0, iters = 0;
  nlohmann::json servers = 0;  // dedicated server count, "colocated", or 0
  bool sync_overlap = true;    // --overlap on|off given to the backend
  std::size_t bytes = 0, count = 0;
  double t_comm_us = 0, t_compute_us = 0, t_total_us = 0, t_inside_us = 0, overlap_pct = 0;
};
nlohmann::json to_json(const OverlapRow& row);

// The rows of one size and backend (one per kind) from every worker's sample: the mean over
// workers of each time, then overlap_percent of the means. `base` carries the descriptive
// fields (backend, np, workers, servers, bytes, ...); `kinds` names the samples' entries.
std::vector<OverlapRow> overlap_rows(const OverlapRow& base, const std::vector<std::string>& kinds,
                                     const std::vector<OverlapSample>& workers);

// `mpi-nothread` (bench_overlap_nothread.cc): one MPI_Iallreduce posted at the last tensor_ready
// and completed in wait_params/flush, without a communication thread - osu_iallreduce's pattern,
// the reference that shows what the backends' threads buy. Collective over `world` (an MpiComm,
// or a SubComm of one).
std::unique_ptr<GradientSync> make_nothread_iallreduce(std::shared_ptr<Comm> world,
                                                       Seconds timeout);

// Runs the overlap benchmark on every rank of `world` (cfg.bench: sizes, -n, -w, backends,
// compute kinds; cfg.sync for the backends) and prints on rank 0. Returns the rows (complete on
// rank 0). Throws ConfigError for unknown backends or kinds. `checked` runs on every rank once
// the options and backends are checked, before the table (as run_bench_harness's).
std::vector<OverlapRow> run_overlap_bench(const Config& cfg, std::shared_ptr<Comm> world,
                                          const std::function<void()>& checked = {});

}  // namespace starring
