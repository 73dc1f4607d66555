// The registry that maps a backend's name (--backend) to its factory. Adding a backend is adding
// a file experiments/register_<name>.cc with a static StarRing registrar, never editing the
// trainer:
//
//   static starring::BackendRegistrar reg("ring", [](const BackendContext& ctx) { ... });
//
// A factory decides this rank's role from the Config (never from the environment) and returns:
//  - on a worker rank: `sync` (the GradientSync) and `workers` (a Comm over the worker ranks only,
//    used by the trainer for the sampler shard and evaluation reductions);
//  - on a dedicated server rank (ps): `serve`, which runs the server loop until clean shutdown.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/config.h"
#include "common/gradient_sync.h"
#include "common/trace.h"

namespace starring {

class Device;

struct BackendContext {
  const Config& cfg;
  std::shared_ptr<Comm> world;  // every rank of the job
  Trace* trace = nullptr;       // may be null
  Device* device = nullptr;     // the compute device of this rank
};

struct Backend {
  std::string role = "worker";  // "worker" | "server"
  int worker_index = 0;         // 0..num_workers-1 on workers
  int num_workers = 1;
  std::shared_ptr<Comm> workers;       // workers only, renumbered 0..num_workers-1
  std::unique_ptr<GradientSync> sync;  // workers
  std::function<void()> serve;         // servers: blocks until shutdown
  // Optional, any rank: totals this rank's backend wants in the run summary, read after training
  // (servers: {"bytes_sent","bytes_recv","busy_s",...}; hosts of a ps shard: "staleness_hist").
  std::function<nlohmann::json()> stats;
};

using BackendFactory = std::function<Backend(const BackendContext&)>;

class BackendRegistry {
 public:
  static BackendRegistry& instance();  // the one table of factories (static registration only)
  void add(const std::string& name, BackendFactory f);  // Error if `name` is taken
  Backend create(const std::string& name,
                 const BackendContext& ctx) const;  // ConfigError if unknown
  // ConfigError naming the known backends if `name` is not one: preflight's check, before any
  // rank loads its data (create() found a typo only after that, and after the note that one
  // process of backend 'rign' would run a single worker).
  void require(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  const BackendFactory* find(const std::string& name) const;
  std::vector<std::pair<std::string, BackendFactory>> factories_;
};

struct BackendRegistrar {
  BackendRegistrar(const std::string& name, BackendFactory f) {
    BackendRegistry::instance().add(name, std::move(f));
  }
};

}  // namespace starring
