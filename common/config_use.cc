// check_train_options_apply: `starring train` options that would do nothing in this run, refused
// with one ConfigError line naming the option, rather than silently ignored (a user who sets
// --staleness under bsp, or --ps-partition with the ring, believes the run used it).
// An option counts as set when its value differs from the built-in default (wherever it came
// from: the command line or an INI file), as --consistency is judged in experiments/main.cc.
#include <string>

#include "common/config.h"
#include "common/config_detail.h"
#include "common/error.h"

namespace starring {
namespace {

using detail::concat;

[[noreturn]] void refuse(const std::string& option, const std::string& why) {
  throw ConfigError(concat(option, ": ", why));
}

void check_sync_options(const SyncConfig& s, const SyncConfig& d) {
  if (s.consistency != "ssp" && s.staleness != d.staleness)
    refuse(concat("--staleness ", s.staleness),
           concat("only --consistency ssp bounds the staleness, and this run is ", s.consistency));
  const std::string backend = concat("--backend is '", s.backend, "'");
  if (s.backend != "ps") {
    const std::string why =
        concat("a parameter-server option, and ", backend, " (use --backend ps)");
    if (s.servers != d.servers) refuse(concat("--servers ", s.servers), why);
    if (s.ps_partition != d.ps_partition) refuse(concat("--ps-partition ", s.ps_partition), why);
    if (s.ps_chunk_bytes != d.ps_chunk_bytes)
      refuse(concat("--ps-chunk-bytes ", format_bytes(s.ps_chunk_bytes)), why);
    if (s.ps_shared_memory != d.ps_shared_memory)
      refuse(concat("--ps-shared-memory ", s.ps_shared_memory ? "on" : "off"), why);
  }
  if (s.backend != "ring" && s.backend != "ring-p2p" && s.segment_bytes != d.segment_bytes)
    refuse(concat("--segment-bytes ", format_bytes(s.segment_bytes)),
           concat("the ring's pipelining segment, and ", backend));
  if (s.backend != "nccl" && s.nccl_force_ring != d.nccl_force_ring)
    refuse("--nccl-force-ring", concat("only --backend nccl runs NCCL, and ", backend));
  if (s.backend == "local") {  // the optimizer steps each tensor as its gradient is final
    const std::string why = "backend 'local' (one worker) syncs no gradients";
    if (s.bucket_mb != d.bucket_mb) refuse(concat("--bucket-mb ", s.bucket_mb), why);
    if (s.overlap != d.overlap) refuse(concat("--overlap ", s.overlap ? "on" : "off"), why);
  }
}

void check_train_options(const TrainConfig& t, const TrainConfig& d) {
  const OptimizerConfig &o = t.opt, &od = d.opt;
  if (o.type == "adamw" && o.momentum != od.momentum)
    refuse(concat("--momentum ", o.momentum),
           "sgd's momentum, and --optimizer is adamw (see --beta1)");
  if (o.type == "sgd") {
    const std::string why = "an adamw setting, and --optimizer is sgd";
    if (o.beta1 != od.beta1) refuse(concat("--beta1 ", o.beta1), why);
    if (o.beta2 != od.beta2) refuse(concat("--beta2 ", o.beta2), why);
    if (o.eps != od.eps) refuse(concat("--eps ", o.eps), why);
  }
  // trainer/learning_rate.cc: the warm-up goes from --lr to the scaled rate, the same rate here
  if (t.warmup_steps > 0 && t.lr_scale == "none")
    refuse(concat("--warmup-steps ", t.warmup_steps),
           "the warm-up rises from --lr to the rate --lr-scale scales it to, and with --lr-scale "
           "none that is --lr: nothing to warm up (use --lr-scale linear or sqrt)");
}

void check_data_options(const DataConfig& a, const DataConfig& d) {
  if (a.dataset == "synthetic") {
    if (a.data_dir != d.data_dir)
      refuse(concat("--data-dir ", a.data_dir), "--dataset synthetic reads no files");
    return;
  }
  const std::string why = concat("a synthetic-data setting, and --dataset is ", a.dataset);
  if (a.synthetic_train != d.synthetic_train)
    refuse(concat("--synthetic-train ", a.synthetic_train), why);
  if (a.synthetic_test != d.synthetic_test)
    refuse(concat("--synthetic-test ", a.synthetic_test), why);
  if (a.synthetic_dim != d.synthetic_dim) refuse(concat("--synthetic-dim ", a.synthetic_dim), why);
  if (a.synthetic_classes != d.synthetic_classes)
    refuse(concat("--synthetic-classes ", a.synthetic_classes), why);
}

}  // namespace

void check_train_options_apply(const Config& cfg, int workers) {
  const Config d;
  check_sync_options(cfg.sync, d.sync);
  check_train_options(cfg.train, d.train);
  check_data_options(cfg.data, d.data);
  if (cfg.ckpt.dir.empty() && cfg.ckpt.keep != d.ckpt.keep)
    refuse(concat("--keep-checkpoints ", cfg.ckpt.keep), "needs --checkpoint-dir (what to keep)");
  // RANK:MS names a worker (trainer/straggler.h); a dedicated server's rank was refused only
  // by the workers once training began, and the server was aborted (several lines).
  const std::string& st = cfg.train.straggler;
  if (!st.empty() && st.rfind("any:", 0) != 0) {
    const long long rank = std::stoll(st.substr(0, st.find(':')));  // format already checked
    if (rank >= workers)
      refuse(concat("--straggler ", st),
             concat("RANK is a worker's index, and there are ", workers, " workers",
                    cfg.sync.backend == "ps" && cfg.sync.servers != "colocated"
                        ? " (the dedicated servers are not workers)"
                        : ""));
  }
}

}  // namespace starring
