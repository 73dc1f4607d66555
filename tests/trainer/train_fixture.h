// Shared set-up for trainer-level tests: a small synthetic problem and a helper that trains it
// on N in-process ranks with any registered backend.
#pragma once
#include <mutex>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/device.h"
#include "common/inproc_comm.h"
#include "experiments/train_run.h"

namespace starring::testing {

inline Config small_config() {
  Config cfg;
  cfg.command = "train";
  cfg.data.dataset = "synthetic";
  cfg.data.synthetic_train = 1024;
  cfg.data.synthetic_test = 256;
  cfg.data.synthetic_dim = 32;
  cfg.data.synthetic_classes = 4;
  cfg.model.preset = "custom";
  cfg.model.hidden = {24, 16};
  cfg.train.batch = 16;
  cfg.train.epochs = 1;
  cfg.train.lr = 0.05f;
  cfg.train.eval_each_epoch = false;
  cfg.out.progress = "off";
  cfg.sync.timeout_s = 30;
  return cfg;
}

// small_config() for checkpoint and stop tests: 20 steps over several epochs (2 workers: 8 steps
// per epoch), warm-up and a cosine schedule, so a resumed run must carry the step, the epoch and
// the position inside it; `backend` with ps's tiny chunks (several even on this model).
inline Config resumable_config(const std::string& backend, const std::string& servers) {
  Config cfg = small_config();
  cfg.data.synthetic_train = 256;
  cfg.train.epochs = 4;
  cfg.train.max_steps = 20;
  cfg.train.warmup_steps = 3;
  cfg.train.lr_schedule = "cosine";
  cfg.sync.backend = backend;
  if (backend == "ps") {
    cfg.sync.servers = servers;
    cfg.sync.consistency = "bsp";
    cfg.sync.ps_chunk_bytes = 1024;
  }
  return cfg;
}

// Trains on `world_size` in-process ranks; returns every rank's outcome. `device`: the model's
// Device, "cpu" or "cuda" (every worker on GPU 0; throws Error when no GPU is usable; dedicated
// servers on the CPU, as in `starring train`: device_for_rank).
inline std::vector<RankOutcome> train_inproc(const Config& cfg, int world_size,
                                             const std::string& device = "cpu") {
  auto data = load_data(cfg);
  std::vector<RankOutcome> outs(world_size);
  run_ranks(
      world_size,
      [&](Comm& c) {
        // run_ranks hands out a Comm&; the registry wants shared ownership without deleting it.
        std::shared_ptr<Comm> world(&c, [](Comm*) {});
        Config rank_cfg = cfg;
        rank_cfg.train.device = device;
        const std::string kind = device_for_rank(rank_cfg, c.rank(), world_size);
        auto dev = make_device(kind, 1, kind == "cpu" ? c.rank() : 0);
        if (kind == "cuda" && !dev->is_gpu()) throw Error("no GPU for a cuda case");
        outs[c.rank()] = run_rank(cfg, world, *dev, nullptr, &data.first, &data.second);
      },
      Seconds(cfg.sync.timeout_s));
  return outs;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : 1e30;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

}  // namespace starring::testing
