// The `ps` backend: sharded parameter servers (ps/). Roles come from --servers:
//   S          -> the last S ranks serve (Backend::serve), the first W = N - S train;
//   colocated  -> every rank trains and serves one shard from a thread of its own process.
// Backend::stats, read after training: every host of a shard reports that shard's staleness
// histogram once (so summing over ranks counts each push once) -
//   dedicated server: its totals (bytes_sent, bytes_recv, busy_s, staleness_hist, ...);
//   co-located worker: its own shard's busy_s, staleness_hist and totals ("shard");
//   worker 0 also: "servers", every server's totals as sent with its goodbye.
#include <memory>

#include "allreduce/private_comm.h"
#include "common/error.h"
#include "common/sub_comm.h"
#include "experiments/backend_registry.h"
#include "ps/ps_worker.h"
#include "ps/server_loop.h"

namespace starring {
namespace {

Backend make_ps_backend(const BackendContext& ctx) {
  const SyncConfig& sc = ctx.cfg.sync;
  STARRING_CONFIG_CHECK(sc.compress == "none", "--compress ", sc.compress,
                        " is implemented by the ring backend only (the parameter server moves "
                        "float32)");
  auto group = ps::make_ps_group(sc.servers, ctx.world->size());
  const int rank = ctx.world->rank();
  // The servers' and workers' messages travel on a Comm of their own (collective: every rank
  // makes it here), so a worker's byte counters hold its pushes and pulls alone, not the
  // trainer's own messages (barriers, evaluation counts) on the world it shares.
  const std::shared_ptr<Comm> ps_comm = private_comm(ctx.world);
  Backend b;
  b.num_workers = group.num_workers();
  if (group.is_dedicated_server(rank)) {
    b.role = "server";
    ps::ServerOptions so;
    so.timeout = Seconds(sc.timeout_s);
    so.chunk_bytes = sc.ps_chunk_bytes;
    so.shared_memory = sc.ps_shared_memory;
    so.fault = ctx.cfg.train.fault;
    so.untimed_steps = ctx.cfg.train.untimed_steps;
    so.trace = ctx.trace;
    auto result = std::make_shared<nlohmann::json>(nlohmann::json::object());
    b.serve = [ps_comm, group, so, result] {
      ps::ServerLoop loop(ps_comm, group, so);
      *result = loop.run();
    };
    b.stats = [result] { return *result; };
    return b;
  }
  b.worker_index = group.worker_index(rank);
  b.workers =
      group.colocated ? ctx.world : std::make_shared<SubComm>(ctx.world, group.worker_ranks);
  auto opts = ps::worker_options(sc, ctx.trace);
  opts.fault = ctx.cfg.train.fault;
  opts.untimed_steps = ctx.cfg.train.untimed_steps;
  auto worker = std::make_unique<ps::PsWorker>(ps_comm, group, opts);
  ps::PsWorker* w = worker.get();
  const bool colocated = group.colocated, first = b.worker_index == 0;
  b.stats = [w, colocated, first] {
    nlohmann::json out = nlohmann::json::object();
    if (first) out["servers"] = w->server_stats();
    if (colocated) {
      const nlohmann::json shard = w->local_server_stats();
      out["shard"] = shard;
      out["busy_s"] = shard.value("busy_s", 0.0);
      out["staleness_hist"] = shard.value("staleness_hist", nlohmann::json::object());
    }
    return out;
  };
  b.sync = std::move(worker);
  return b;
}

const BackendRegistrar kPs("ps", make_ps_backend);

}  // namespace
}  // namespace starring
