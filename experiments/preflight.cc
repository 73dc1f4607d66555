// Phase 1 of `starring` (preflight.h): checks each rank can make alone, before any communication.
#include "experiments/preflight.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/config_detail.h"
#include "common/dataset.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/test_hosts.h"
#include "experiments/backend_registry.h"
#include "experiments/output_checks.h"
#include "ps/ps_group.h"
#include "trainer/checkpoint.h"

namespace starring {

namespace {

using detail::concat;

// Training options that only mean something with another backend or world size: refused rather
// than ignored (their format is already checked by parse_config).
void check_meaningful(const Config& cfg, int size) {
  if (cfg.command != "train") return;
  const auto& s = cfg.sync;
  if (s.backend != "ps" && s.consistency != "bsp")
    throw ConfigError(concat("--consistency ", s.consistency,
                             ": only --backend ps relaxes "
                             "consistency; '",
                             s.backend, "' is synchronous (bsp)"));
  const std::string& f = cfg.train.fault;
  const auto [kind, rank, step] = parse_fault(f);
  if (kind.empty()) return;
  if (rank >= size)
    throw ConfigError(
        concat("--fault ", f, ": there is no rank ", rank, " (", size, " ranks were started)"));
  if (step < 1) throw ConfigError(concat("--fault ", f, ": STEP must be >= 1"));
  if (cfg.train.max_steps > 0 && step > cfg.train.max_steps)  // it would never fire
    throw ConfigError(concat("--fault ", f, ": the run stops at --max-steps ", cfg.train.max_steps,
                             ", before step ", step));
}

// --fault stop:RANK:STEP is a worker's request (RANK a worker index) that the run must be able to
// act on (trainer/stop_vote.h): refused where it would be ignored.
void check_stop_fault(const Config& cfg, int workers) {
  const std::string& f = cfg.train.fault;
  if (parse_fault(f).rank >= workers)
    throw ConfigError(concat("--fault ", f, ": RANK is a worker's index here, and there are ",
                             workers, " workers"));
  if (cfg.ckpt.dir.empty())
    throw ConfigError(concat("--fault ", f,
                             ": a stop request needs --checkpoint-dir (where the stopped run's "
                             "checkpoint goes); without one it is ignored"));
  if (cfg.sync.backend == "ps" && cfg.sync.consistency == "asp")
    throw ConfigError(concat("--fault ", f,
                             ": under --consistency asp a stop request is ignored (the workers "
                             "drift apart without bound: no step to agree on)"));
}

// A bench message every rank cannot even hold twice (its input and output) fails here: found by
// one rank's allocation (the memcpy baseline runs on rank 0 alone), the others waited at a
// barrier for minutes.
void check_bench_memory(std::size_t max_bytes) {
  const double memory = physical_memory_bytes(), need = 2.0 * double(max_bytes);
  if (memory > 0 && need > memory)
    throw ConfigError(concat("--max-bytes ", format_bytes(max_bytes),
                             ": each rank holds at least two buffers of this size, more than this "
                             "machine's memory (",
                             std::round(memory / (1 << 30) * 10) / 10, " GiB)"));
}

// --resume: worker 0 (rank 0) reads and checks the checkpoint before any communication, so a
// missing, corrupt or misfit one is bad input all ranks agree on (found later, a dedicated server
// waited for the failed workers until MPI_Abort). The model's input and output widths come from
// the data, read later: the trainer checks those. Returns the file (--resume latest resolved, so
// the trainer reads the same one, and warns of a corrupt newer one only once).
std::string check_resume(const Config& cfg, int workers, long long train_samples) {
  if (cfg.ckpt.resume.empty()) return "";
  std::string path;
  const CheckpointData c = load_resume(cfg.ckpt, "rank 0", path);
  if (path.empty()) return cfg.ckpt.resume;  // "auto" on a folder with none: a fresh run
  const auto& t = cfg.train;
  // The data's widths as the checkpoint has them (crafted ones refused), this run's hidden ones.
  const std::vector<int> saved = checkpoint_widths(c, path, "rank 0");
  std::vector<int> widths = {saved.front()};
  widths.insert(widths.end(), cfg.model.hidden.begin(), cfg.model.hidden.end());
  widths.push_back(saved.back());
  std::size_t params = 0;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i)
    params += std::size_t(widths[i]) * widths[i + 1] + widths[i + 1];
  check_checkpoint_fits(c, widths, params, t.opt.type, path, "rank 0");
  check_resume_fits_run(c, cfg, workers, train_samples, path, "rank 0");
  // A kill or hang the checkpoint has already passed never fires on a worker (it fires at its
  // step exactly, and the resumed run starts after the checkpoint's): the run ended with exit 0
  // as if the fault had been survived. A PS server's fires at the first push from that step on.
  const std::string& f = t.fault;
  if (const auto [kind, rank, step] = parse_fault(f); !kind.empty() && kind != "stop") {
    const bool serves =
        cfg.sync.backend == "ps" && (cfg.sync.servers == "colocated" || rank >= workers);
    if (!serves && step <= c.step)
      throw ConfigError(concat("--fault ", f, ": the run resumes after step ", c.step, " (", path,
                               "), so step ", step, " is never reached"));
  }
  return path;
}

// Optimizer steps of one epoch and of the whole run, as the trainer counts them
// (trainer/trainer.cc): `n` training samples over `workers`, the remainder dropped.
struct RunSteps {
  long long per_epoch, total;
};
RunSteps run_steps(const TrainConfig& t, long long n, int workers) {
  const long long per_epoch = n / (static_cast<long long>(workers) * t.batch) / t.accum;
  long long total = per_epoch * t.epochs;
  if (t.max_steps >= 0) total = std::min<long long>(total, t.max_steps);
  return {per_epoch, total};
}

// A warm-up as long as the run: the rate never reaches the scaled one, and a cosine never
// starts (a shortened test run of experiments/fmnist_mlp.ini's 100 warm-up steps). A note, on
// rank 0.
void note_warmup_past_the_run(const TrainConfig& t, long long n, int workers) {
  if (workers < 2 || t.lr_scale == "none" || t.warmup_steps <= 0) return;
  const long long steps = run_steps(t, n, workers).total;
  if (steps > t.warmup_steps) return;
  std::fprintf(stderr,
               "[starring] note: --warmup-steps %d is not shorter than the run (%lld steps): the "
               "rate never reaches --lr x the --lr-scale %s factor%s\n",
               t.warmup_steps, steps, t.lr_scale.c_str(),
               t.lr_schedule == "cosine" ? ", and the cosine decay never starts" : "");
}

// A --fault STEP past the run's last step (its epochs, not only --max-steps: check_meaningful)
// never fires, and the run ended with exit 0 as if the fault had been survived.
void check_fault_reached(const TrainConfig& t, long long n, int workers) {
  const std::int64_t step = parse_fault(t.fault).step;
  const RunSteps steps = run_steps(t, n, workers);
  if (step > steps.total)
    throw ConfigError(concat("--fault ", t.fault, ": the run has only ", steps.total, " steps (",
                             t.epochs, " epoch(s) of ", steps.per_epoch, "), so step ", step,
                             " is never reached"));
}

}  // namespace

namespace {
// Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE in every process it launches, even at -np 1,
// MPICH's and Slurm's PMI PMI_SIZE, PMIx launchers (srun --mpi=pmix, prterun) PMIX_RANK; an MPI
// singleton (no launcher) has none. Read before main(), so before MPI_Init: Open MPI's singleton
// start sets PMIX_RANK in this process's own environment.
bool launcher_variables_set() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name)) return true;
  return false;
}
const bool kStartedByLauncher = launcher_variables_set();
}  // namespace

bool started_by_launcher() { return kStartedByLauncher; }

// `starring train --backend ring` started without mpirun is a job of one process: it trains one
// worker and moves nothing, which a user who forgot the launcher would not guess from the
// summary alone (helper-100's audit).
void note_single_process(const Config& cfg, int rank, int size) {
  if (size != 1 || rank != 0 || started_by_launcher()) return;
  if (cfg.command == "train" && cfg.sync.backend != "local")
    std::fprintf(stderr,
                 "[starring] note: one process (not started by mpirun): backend '%s' runs a "
                 "single worker and moves no data; for N workers: scripts/mpirun.sh -np N "
                 "build/bin/starring train ...\n",
                 cfg.sync.backend.c_str());
  if (cfg.command == "bench")
    std::fprintf(stderr,
                 "[starring] note: one process (not started by mpirun): an all-reduce of one "
                 "rank moves no data; for N ranks: scripts/mpirun.sh -np N build/bin/starring "
                 "bench ...\n");
}

void preflight(Config& cfg, int rank, int size) {
  test_host_index();  // a malformed test hook (common/test_hosts.h): one line, exit 2
  if (cfg.command == "bench") check_bench_memory(cfg.bench.max_bytes);
  for (const auto& note : size_notes(cfg))  // sizes used other than as given
    if (rank == 0) std::fprintf(stderr, "[starring] note: %s\n", note.c_str());
  if (cfg.command == "bench")
    for (const auto& note : check_bench_options_apply(cfg))
      if (rank == 0) std::fprintf(stderr, "[starring] note: %s\n", note.c_str());
  // Only `train` writes these files (an INI shared with bench or env may still name them).
  if (cfg.command != "train") return;
  BackendRegistry::instance().require(cfg.sync.backend);  // a typo: before the data is loaded
  check_meaningful(cfg, size);
  check_distinct_outputs(cfg, size);
  if (rank == 0) {  // rank 0 writes the metrics and the summary
    check_output("--metrics-file", cfg.out.metrics_file);
    check_output("--summary-file", cfg.out.summary_file);
    check_checkpoint_dir(cfg.ckpt);
    check_checkpoint_dir_writable(cfg.ckpt.dir);
  }
  check_output("--trace", expand_rank(cfg.out.trace_file, rank));
  const std::string& ds = cfg.data.dataset;
  const bool idx = ds == "fashion-mnist" || ds == "mnist";
  const int n = idx ? check_idx_dataset(cfg.data.data_dir) : cfg.data.synthetic_train;
  // Each worker's shard must hold one optimizer step (as the trainer checks, but here every rank
  // agrees before any communication, dedicated servers included).
  const auto& s = cfg.sync;
  // (make_ps_group: --servers beyond int or with no rank left for a worker is a ConfigError)
  const int workers = s.backend == "ps" ? ps::make_ps_group(s.servers, size).num_workers() : size;
  const auto& t = cfg.train;
  for (const auto& note : check_train_options_apply(cfg, workers))
    if (rank == 0) std::fprintf(stderr, "[starring] note: %s\n", note.c_str());
  if (parse_fault(t.fault).kind == "stop") check_stop_fault(cfg, workers);
  if (workers >= 1 && (ds == "synthetic" || idx) &&
      static_cast<long long>(n / workers) < static_cast<long long>(t.batch) * t.accum)
    throw ConfigError(concat("batch ", t.batch, " x accum ", t.accum,
                             " is larger than each worker's shard (", n / workers, " of ", n,
                             " samples over ", workers, " workers)"));
  if (rank == 0 && (ds == "synthetic" || idx)) note_warmup_past_the_run(t, n, workers);
  if (!t.fault.empty() && workers >= 1 && (ds == "synthetic" || idx))
    check_fault_reached(t, n, workers);
  if (rank == 0) cfg.ckpt.resume = check_resume(cfg, workers, ds == "synthetic" || idx ? n : -1);
  // Last: before the checks it said 'runs a single worker' of a run they then refused
  // ('--servers 1 needs at least 2 ranks').
  note_single_process(cfg, rank, size);
}

}  // namespace starring
