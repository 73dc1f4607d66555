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

// How long, beyond --timeout, the ranks wait for each other to load the data before they agree
// that every rank has it: 5 s plus 1 s per 4 MB of floats one rank builds (the full
// Fashion-MNIST: 60 s, the fixed allowance before; 65536 + 2048 synthetic samples of 784
// features: 58 s, where one process alone drew them and trained a step in 1.7 s; 576 samples of
// 16 features: 5 s, so that tests can stop a rank there).
Seconds load_allowance(const DataConfig& d);

// cfg must be finalized. `world` is every rank of the job. Loads data only on worker ranks.
RankOutcome run_rank(const Config& cfg, std::shared_ptr<Comm> world, Device& device, Trace* trace);
// Same, with data already loaded (tests share one copy between in-process ranks).
RankOutcome run_rank(const Config& cfg, std::shared_ptr<Comm> world, Device& device, Trace* trace,
                     const Dataset* train, const Dataset* test);
// Whether `rank` of `size` is a dedicated parameter-server rank (--backend ps, --servers N); throws
// ConfigError on a bad --servers.
bool is_dedicated_server(const Config& cfg, int rank, int size);
// The Device kind `rank` computes with: --device, but "cpu" on a dedicated server, which computes
// no model (its shard's optimizer runs on the host): with --device cuda it made a CUDA context and
// a cuBLAS handle on a worker's GPU (the servers are the last ranks, so on a node with as many
// GPUs as workers it took GPU 0.. again; in EXCLUSIVE_PROCESS mode it could take the GPU from
// the worker, which then fell back to the CPU), and printed the fallback line without a GPU.
std::string device_for_rank(const Config& cfg, int rank, int size);
// A parameter-server rank's part, for its --trace process name: "server 1" (dedicated), "worker
// 0", "worker 0 + server 0" (co-located); "" for the other backends, whose ranks are all workers.
std::string ps_role(const Config& cfg, int rank, int size);

}  // namespace starring
