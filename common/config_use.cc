// check_train_options_apply / check_bench_options_apply: `starring train` (`bench`) options that
// would do nothing in this run, refused with one ConfigError line naming the option, rather than
// silently ignored (a user who sets --staleness under bsp, or --ps-partition with the ring,
// believes the run used it; `bench --backends ps --consistency asp` timed bsp push-pulls).
// An option counts as set when its value differs from the built-in default, as --consistency is
// judged in experiments/main.cc. One set in the --config file only gives a note: an INI file is a
// base that serves several backends (experiments/fmnist_mlp.ini sets warmup-steps for the
// linear scaling rule, and `--lr-scale none` on the command line must still run).
#include <algorithm>
#include <string>

#include "common/config.h"
#include "common/config_detail.h"
#include "common/error.h"

namespace starring {
namespace {

using detail::concat;

// Refuses `key` (shown as `option`, e.g. "--staleness 5") when the command line set it; notes
// it when its value came from the --config file.
class Use {
 public:
  explicit Use(const Config& cfg) : cfg_(cfg) {}
  void refuse(const std::string& key, const std::string& option, const std::string& why) {
    if (!cfg_.from_ini.count(key)) throw ConfigError(concat(option, ": ", why));
    notes_.push_back(concat(cfg_.config_file, " sets ", option.substr(2),
                            ", which this run does not use: ", why));
  }
  std::vector<std::string> notes() && { return std::move(notes_); }

 private:
  const Config& cfg_;
  std::vector<std::string> notes_;
};

// train and bench alike: --staleness without ssp.
void check_staleness(Use& u, const SyncConfig& s, const SyncConfig& d) {
  if (s.consistency != "ssp" && s.staleness != d.staleness)
    u.refuse(
        "staleness", concat("--staleness ", s.staleness),
        concat("only --consistency ssp bounds the staleness, and this run is ", s.consistency));
}

// The parameter-server options every PS layout uses (--servers differs: train's ps has it,
// bench's ps-colocated not), refused with `why` where no PS runs.
void refuse_ps_options(Use& u, const SyncConfig& s, const SyncConfig& d, const std::string& why) {
  if (s.ps_partition != d.ps_partition)
    u.refuse("ps-partition", concat("--ps-partition ", s.ps_partition), why);
  if (s.ps_chunk_bytes != d.ps_chunk_bytes)
    u.refuse("ps-chunk-bytes", concat("--ps-chunk-bytes ", format_bytes(s.ps_chunk_bytes)), why);
  if (s.ps_shared_memory != d.ps_shared_memory)
    u.refuse("ps-shared-memory", concat("--ps-shared-memory ", s.ps_shared_memory ? "on" : "off"),
             why);
}

void check_sync_options(Use& u, const SyncConfig& s, const SyncConfig& d) {
  check_staleness(u, s, d);
  const std::string backend = concat("--backend is '", s.backend, "'");
  if (s.backend != "ps") {
    const std::string why =
        concat("a parameter-server option, and ", backend, " (use --backend ps)");
    if (s.servers != d.servers) u.refuse("servers", concat("--servers ", s.servers), why);
    refuse_ps_options(u, s, d, why);
  }
  if (s.backend != "ring" && s.backend != "ring-p2p" && s.segment_bytes != d.segment_bytes)
    u.refuse("segment-bytes", concat("--segment-bytes ", format_bytes(s.segment_bytes)),
             concat("the ring's pipelining segment, and ", backend));
  if (s.backend != "nccl" && s.nccl_force_ring != d.nccl_force_ring)
    u.refuse("nccl-force-ring", "--nccl-force-ring",
             concat("only --backend nccl runs NCCL, and ", backend));
  if (s.backend == "local") {  // the optimizer steps each tensor as its gradient is final
    const std::string why = "backend 'local' (one worker) syncs no gradients";
    if (s.bucket_mb != d.bucket_mb) u.refuse("bucket-mb", concat("--bucket-mb ", s.bucket_mb), why);
    if (s.overlap != d.overlap)
      u.refuse("overlap", concat("--overlap ", s.overlap ? "on" : "off"), why);
  }
}

void check_train_options(Use& u, const TrainConfig& t, const TrainConfig& d) {
  const OptimizerConfig &o = t.opt, &od = d.opt;
  if (o.type == "adamw" && o.momentum != od.momentum)
    u.refuse("momentum", concat("--momentum ", o.momentum),
             "sgd's momentum, and --optimizer is adamw (see --beta1)");
  if (o.type == "sgd") {
    const std::string why = "an adamw setting, and --optimizer is sgd";
    if (o.beta1 != od.beta1) u.refuse("beta1", concat("--beta1 ", o.beta1), why);
    if (o.beta2 != od.beta2) u.refuse("beta2", concat("--beta2 ", o.beta2), why);
    if (o.eps != od.eps) u.refuse("eps", concat("--eps ", o.eps), why);
  }
  // trainer/learning_rate.cc: the warm-up goes from --lr to the scaled rate, the same rate here
  if (t.warmup_steps > 0 && t.lr_scale == "none")
    u.refuse("warmup-steps", concat("--warmup-steps ", t.warmup_steps),
             "the warm-up rises from --lr to the rate --lr-scale scales it to, and with --lr-scale "
             "none that is --lr: nothing to warm up (use --lr-scale linear or sqrt)");
}

void check_data_options(Use& u, const DataConfig& a, const DataConfig& d) {
  if (a.dataset == "synthetic") {
    if (a.data_dir != d.data_dir)
      u.refuse("data-dir", concat("--data-dir ", a.data_dir), "--dataset synthetic reads no files");
    return;
  }
  const std::string why = concat("a synthetic-data setting, and --dataset is ", a.dataset);
  if (a.synthetic_train != d.synthetic_train)
    u.refuse("synthetic-train", concat("--synthetic-train ", a.synthetic_train), why);
  if (a.synthetic_test != d.synthetic_test)
    u.refuse("synthetic-test", concat("--synthetic-test ", a.synthetic_test), why);
  if (a.synthetic_dim != d.synthetic_dim)
    u.refuse("synthetic-dim", concat("--synthetic-dim ", a.synthetic_dim), why);
  if (a.synthetic_classes != d.synthetic_classes)
    u.refuse("synthetic-classes", concat("--synthetic-classes ", a.synthetic_classes), why);
}

}  // namespace

std::vector<std::string> check_train_options_apply(const Config& cfg, int workers) {
  const Config d;
  Use u(cfg);
  check_sync_options(u, cfg.sync, d.sync);
  check_train_options(u, cfg.train, d.train);
  check_data_options(u, cfg.data, d.data);
  if (cfg.out.metrics_file.empty() && cfg.out.metrics_loss != d.out.metrics_loss)
    u.refuse("metrics-loss", concat("--metrics-loss ", cfg.out.metrics_loss),
             "needs --metrics-file (the lines it fills)");
  if (cfg.ckpt.dir.empty() && cfg.ckpt.keep != d.ckpt.keep)
    u.refuse("keep-checkpoints", concat("--keep-checkpoints ", cfg.ckpt.keep),
             "needs --checkpoint-dir (what to keep)");
  // RANK:MS names a worker (trainer/straggler.h); a dedicated server's rank was refused only
  // by the workers once training began, and the server was aborted (several lines).
  const std::string& st = cfg.train.straggler;
  if (!st.empty() && st.rfind("any:", 0) != 0) {
    const long long rank = std::stoll(st.substr(0, st.find(':')));  // format already checked
    if (rank >= workers)  // not merely unused: training would fail, so the INI's too
      throw ConfigError(concat("--straggler ", st, ": RANK is a worker's index, and there are ",
                               workers, workers == 1 ? " worker" : " workers",
                               cfg.sync.backend == "ps" && cfg.sync.servers != "colocated"
                                   ? " (the dedicated servers are not workers)"
                                   : ""));
  }
  std::vector<std::string> notes = std::move(u).notes();
  // Under asp/ssp a server applies each push as an optimizer step of its own (W momentum steps
  // of g/W per training step): at --momentum 0.9 the largest stable learning rate shrinks about
  // tenfold even at --staleness 0, and runs diverged (docs/REFERENCE.md). Run, but say so.
  const auto& o = cfg.train.opt;
  if (cfg.sync.backend == "ps" && cfg.sync.consistency != "bsp" && workers >= 2 &&
      o.type == "sgd" && o.momentum > 0.5)
    notes.push_back(concat("--consistency ", cfg.sync.consistency, " with --momentum ", o.momentum,
                           ": each of the ", workers,
                           " workers' pushes is a momentum step of its own, which shrinks the "
                           "stable learning rate about tenfold at 0.9 (training may diverge); "
                           "--momentum 0.5 trains (docs/REFERENCE.md)"));
  return notes;
}

namespace {

// The --backends names a bench runs, without their @N suffix.
std::vector<std::string> bench_backends(const Config& cfg) {
  std::vector<std::string> names = cfg.bench.backends;
  if (names.empty()) names = {cfg.sync.backend == "local" ? "ring" : cfg.sync.backend};
  for (auto& n : names) n = n.substr(0, n.find('@'));
  return names;
}

std::string comma_list(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ",") + x;
  return out;
}

}  // namespace

std::vector<std::string> check_bench_options_apply(const Config& cfg) {
  const Config d;
  const SyncConfig &s = cfg.sync, &sd = d.sync;
  const BenchConfig& b = cfg.bench;
  Use u(cfg);
  const auto names = bench_backends(cfg);
  const auto runs = [&](auto pred) { return std::any_of(names.begin(), names.end(), pred); };
  const std::string listed = b.backends.empty()
                                 ? concat("the bench runs '", names[0], "' (no --backends given)")
                                 : concat("--backends is '", comma_list(names), "'");
  if (!b.backends.empty() && s.backend != sd.backend)
    u.refuse("backend", concat("--backend ", s.backend),
             concat("bench runs what --backends names, and ", listed));
  const bool overlap_mode = b.mode == "overlap";
  if (!overlap_mode) {  // the table times one bare all-reduce / push-pull of a single buffer
    const std::string why =
        "only --mode overlap runs the backends' bucketed gradient sync (the bandwidth table "
        "times one buffer's all-reduce or push-pull)";
    if (s.bucket_mb != sd.bucket_mb)
      u.refuse("bucket-mb", concat("--bucket-mb ", s.bucket_mb), why);
    if (s.overlap != sd.overlap)
      u.refuse("overlap", concat("--overlap ", s.overlap ? "on" : "off"), why);
    if (b.compute != d.bench.compute)
      u.refuse("compute", concat("--compute ", comma_list(b.compute)),
               "the overlap benchmark's compute kinds (use --mode overlap)");
    if (s.consistency != sd.consistency)
      u.refuse("consistency", concat("--consistency ", s.consistency),
               "the bandwidth table's push-pull is synchronous (bsp); --mode overlap runs the ps "
               "backend under it");
  }
  check_staleness(u, s, sd);
  const auto is_ps = [](const std::string& n) { return n == "ps" || n == "ps-colocated"; };
  if (!runs(is_ps)) {
    const std::string why =
        concat("a parameter-server option, and ", listed, "; add ps or ps-colocated");
    refuse_ps_options(u, s, sd, why);
    if (overlap_mode && s.consistency != sd.consistency)
      u.refuse("consistency", concat("--consistency ", s.consistency), why);
  }
  if (s.servers != sd.servers && !runs([](const std::string& n) { return n == "ps"; }))
    u.refuse("servers", concat("--servers ", s.servers),
             concat("the dedicated servers of backend ps (ps-colocated puts a shard in every "
                    "worker), and ",
                    listed));
  if (s.segment_bytes != sd.segment_bytes &&
      !runs([](const std::string& n) { return n == "ring" || n == "ring-p2p"; }))
    u.refuse("segment-bytes", concat("--segment-bytes ", format_bytes(s.segment_bytes)),
             concat("the ring's pipelining segment, and ", listed));
  if (s.nccl_force_ring != sd.nccl_force_ring &&
      !runs([](const std::string& n) { return n == "nccl"; }))
    u.refuse("nccl-force-ring", "--nccl-force-ring", concat("only nccl runs NCCL, and ", listed));
  return std::move(u).notes();
}

namespace {

// "is used as 999936 bytes: WHY; the nearest valid values are 999936 and 1000000": a size the
// code cuts into whole units of `unit` bytes.
std::string rounded(std::size_t given, std::size_t unit, const std::string& why) {
  const std::size_t down = given / unit * unit;
  return concat("is used as ", down, " bytes: ", why, "; the nearest valid values are ", down,
                " and ", down + unit);
}

bool runs_ring(const std::string& b) { return b.rfind("ring", 0) == 0; }  // ring-p2p too
bool runs_shm_ring(const std::string& b) { return b == "ring" || b.rfind("ring@", 0) == 0; }
bool runs_ps(const std::string& b) { return b.rfind("ps", 0) == 0; }

// --segment-bytes: the ring cuts segments of whole 16-float blocks (allreduce/ring_allreduce.cc);
// backend 'ring' on one host (float32) runs over shared memory, whose slots take the value
// clamped to 4K..256K (allreduce/shm_ring.cc). One note for both, or "".
std::string segment_note(const SyncConfig& s, const std::vector<std::string>& backends) {
  if (!std::any_of(backends.begin(), backends.end(), runs_ring)) return "";
  constexpr std::size_t kUnit = 16 * sizeof(float), kLo = 4 << 10, kHi = 256 << 10;
  const std::size_t used = s.segment_bytes / kUnit * kUnit;
  std::string note;
  if (used != s.segment_bytes)
    note =
        rounded(s.segment_bytes, kUnit, "the ring cuts its segments in whole blocks of 16 floats");
  const bool shm = s.compress == "none" && s.segment_bytes != SyncConfig{}.segment_bytes &&
                   std::any_of(backends.begin(), backends.end(), runs_shm_ring);
  if (shm && (used < kLo || used > kHi))
    note += concat(
        note.empty() ? ": " : "; ", "with every rank on one host, backend 'ring' runs ",
        "over shared memory, whose segments are 4K to 256K: ", format_bytes(used < kLo ? kLo : kHi),
        " there ('ring-p2p' takes the value as given)");
  if (note.empty()) return "";
  return concat("--segment-bytes ", format_bytes(s.segment_bytes), note[0] == ':' ? "" : " ", note);
}

}  // namespace

std::vector<std::string> size_notes(const Config& cfg) {
  std::vector<std::string> notes;
  const SyncConfig& s = cfg.sync;
  std::vector<std::string> backends{s.backend};
  if (cfg.command == "bench") {
    backends = cfg.bench.backends;
    if (backends.empty()) backends = {s.backend == "local" ? "ring" : s.backend};
    if (cfg.bench.min_bytes % sizeof(float) != 0 && cfg.bench.min_bytes > sizeof(float))
      notes.push_back(concat("-b/--min-bytes ", format_bytes(cfg.bench.min_bytes), " ",
                             rounded(cfg.bench.min_bytes, sizeof(float),
                                     "messages are whole float32 elements, so every row's size "
                                     "is rounded down to a multiple of 4 (the size column shows "
                                     "the bytes sent)")));
  } else if (cfg.command != "train") {
    return notes;
  }
  if (std::string n = segment_note(s, backends); !n.empty()) notes.push_back(n);
  // ps/partition.cc: chunks of whole floats.
  if (std::any_of(backends.begin(), backends.end(), runs_ps) &&
      s.ps_chunk_bytes % sizeof(float) != 0)
    notes.push_back(
        concat("--ps-chunk-bytes ", format_bytes(s.ps_chunk_bytes), " ",
               rounded(s.ps_chunk_bytes, sizeof(float), "a chunk holds whole float32 values")));
  return notes;
}

}  // namespace starring
