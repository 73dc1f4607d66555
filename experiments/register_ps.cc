// The `ps` backend: sharded parameter servers (ps/). Roles come from --servers:
//   S          -> the last S ranks serve (Backend::serve), the first W = N - S train;
//   colocated  -> every rank trains and serves one shard from a thread of its own process.
// Backend::stats: on a dedicated server, its totals after serve() returns (bytes_sent,
// bytes_recv, busy_s, staleness_hist, ...); on a worker, after sync->shutdown(), every server's
// totals (as sent with its goodbye) and the staleness histogram merged over servers.
#include <memory>

#include "common/error.h"
#include "common/sub_comm.h"
#include "experiments/backend_registry.h"
#include "ps/ps_worker.h"
#include "ps/server_loop.h"

namespace starring {
namespace {

nlohmann::json merged_hist(const nlohmann::json& servers) {
  std::map<long, std::uint64_t> h;
  for (const auto& s : servers)
    if (s.is_object() && s.contains("staleness_hist"))
      for (const auto& [k, v] : s["staleness_hist"].items())
        h[std::stol(k)] += v.get<std::uint64_t>();
  nlohmann::json out = nlohmann::json::object();
  for (auto [k, v] : h) out[std::to_string(k)] = v;
  return out;
}

Backend make_ps_backend(const BackendContext& ctx) {
  const SyncConfig& sc = ctx.cfg.sync;
  auto group = ps::make_ps_group(sc.servers, ctx.world->size());
  const int rank = ctx.world->rank();
  Backend b;
  b.num_workers = group.num_workers();
  if (group.is_dedicated_server(rank)) {
    b.role = "server";
    ps::ServerOptions so;
    so.timeout = Seconds(sc.timeout_s);
    so.chunk_bytes = sc.ps_chunk_bytes;
    so.fault = ctx.cfg.train.fault;
    so.trace = ctx.trace;
    auto result = std::make_shared<nlohmann::json>(nlohmann::json::object());
    auto world = ctx.world;
    b.serve = [world, group, so, result] {
      ps::ServerLoop loop(world, group, so);
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
  auto worker = std::make_unique<ps::PsWorker>(ctx.world, group, opts);
  ps::PsWorker* w = worker.get();
  b.stats = [w] {
    nlohmann::json servers = w->server_stats();
    return nlohmann::json{{"servers", servers}, {"staleness_hist", merged_hist(servers)}};
  };
  b.sync = std::move(worker);
  return b;
}

const BackendRegistrar kPs("ps", make_ps_backend);

}  // namespace
}  // namespace starring
