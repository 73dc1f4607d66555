// One rank's part of a training run, shared by `starring train` and the tests: asks the registry
// for the configured backend, then trains (worker ranks) or serves (dedicated server ranks).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/comm.h"
#include "common/config.h"
#include "common/dataset.h"
#include "common/device.h"
#include "common/trace.h"
#include "trainer/trainer.h"

namespace starring {

struct RankOutcome {
  std::string role;  // "worker" | "server"
  int num_workers = 1;
  TrainResult result;                                       // workers
  nlohmann::json backend_stats = nlohmann::json::object();  // Backend::stats(), if any
};

// Train/test sets named by cfg.data (synthetic sets: one draw split in two, so they share
// the class structure).
std::pair<Dataset, Dataset> load_data(const Config& cfg);

// cfg must be finalized. `world` is every rank of the job. Loads data only on worker ranks.
RankOutcome run_rank(const Config& cfg, std::shared_ptr<Comm> world, Device& device, Trace* trace);
// Same, with data already loaded (tests share one copy between in-process ranks).
RankOutcome run_rank(const Config& cfg, std::shared_ptr<Comm> world, Device& device, Trace* trace,
                     const Dataset* train, const Dataset* test);

}  // namespace starring
