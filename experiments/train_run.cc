// One rank's part of a run: see train_run.h.
#include "experiments/train_run.h"

#include "common/error.h"
#include "experiments/backend_registry.h"

namespace starring {

std::pair<Dataset, Dataset> load_data(const Config& cfg) {
  const DataConfig& d = cfg.data;
  if (d.dataset == "synthetic") {
    Dataset all = make_synthetic(d.synthetic_train + d.synthetic_test, d.synthetic_dim,
                                 d.synthetic_classes, cfg.train.seed);
    Dataset train = all, test = all;
    train.n = d.synthetic_train;
    train.x.resize(static_cast<std::size_t>(train.n) * all.dim);
    train.y.resize(train.n);
    test.n = d.synthetic_test;
    test.x.assign(all.x.begin() + static_cast<std::ptrdiff_t>(train.x.size()), all.x.end());
    test.y.assign(all.y.begin() + train.n, all.y.end());
    return {std::move(train), std::move(test)};
  }
  STARRING_CONFIG_CHECK(d.dataset == "fashion-mnist" || d.dataset == "mnist", "unknown --dataset '",
                        d.dataset, "' (fashion-mnist | mnist | synthetic)");
  return {load_idx_dataset(d.data_dir, true), load_idx_dataset(d.data_dir, false)};
}

RankOutcome run_rank(const Config& cfg, std::shared_ptr<Comm> world, Device& device, Trace* trace) {
  return run_rank(cfg, world, device, trace, nullptr, nullptr);
}

RankOutcome run_rank(const Config& cfg, std::shared_ptr<Comm> world, Device& device, Trace* trace,
                     const Dataset* train, const Dataset* test) {
  BackendContext ctx{cfg, world, trace, &device};
  Backend be = BackendRegistry::instance().create(cfg.sync.backend, ctx);
  RankOutcome out;
  out.role = be.role;
  out.num_workers = be.num_workers;
  if (be.role == "server") {
    if (trace) trace->set_thread_name("server");
    be.serve();
  } else {
    std::pair<Dataset, Dataset> own;
    if (!train || !test) {
      own = load_data(cfg);
      train = &own.first;
      test = &own.second;
    }
    Trainer trainer(cfg, TrainerEnv{*be.workers, *be.sync, device, trace});
    out.result = trainer.run(*train, *test);
    be.sync->shutdown();
  }
  if (be.stats) out.backend_stats = be.stats();
  return out;
}

}  // namespace starring
