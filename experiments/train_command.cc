// `starring train`: builds the device, asks the registry for the backend named in the config,
// and runs either the Trainer (worker ranks) or the server loop (dedicated server ranks). At the
// end every rank sends its totals to world rank 0, which prints the summary and writes
// --summary-file (schema "starring.run.v1", see docs/REFERENCE.md).

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/comm_util.h"
#include "common/dataset.h"
#include "common/device.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/gpu_assignment.h"
#include "experiments/backend_registry.h"
#include "experiments/commands.h"
#include "experiments/host_cpus.h"
#include "experiments/train_run.h"
#include "experiments/train_summary.h"
#include "trainer/checkpoint.h"
#include "trainer/metrics.h"
#include "trainer/trainer.h"

namespace starring {
namespace {

// Every rank's totals travel to world rank 0 as a JSON string.
std::vector<nlohmann::json> gather_to_root(Comm& world, const nlohmann::json& mine) {
  const int tag = tags::kRunTotals;
  std::vector<nlohmann::json> all;
  if (world.rank() != 0) {
    send_text(world, mine.dump(), 0, tag, world.timeout());
    return all;
  }
  all.push_back(mine);
  for (int r = 1; r < world.size(); ++r) {
    std::string s;
    try {
      s = recv_text(world, r, tag, world.timeout(), kMaxNoteBytes,
                    "its totals for the run summary");
    } catch (const TimeoutError& e) {  // it names the rank; what it waited for, by tag alone
      throw TimeoutError(detail::concat(e.what(), ": rank ", r,
                                        " did not send its totals for the run summary (stopped, "
                                        "stuck or slow at the end of its run)"));
    }
    try {
      all.push_back(nlohmann::json::parse(s));
    } catch (const nlohmann::json::exception& e) {
      throw Error(detail::concat(world.where(), ": rank ", r,
                                 "'s totals for the run summary are not JSON: ", e.what()));
    }
  }
  return all;
}

// A parameter-server shard's busy seconds over the timed steps, as the workers' times are: its
// whole run's (busy_s) less its busy time through the first `untimed` steps (the cumulative
// busy_untimed_s of ps::ServerLoop::run, taken out of `stats`). A dedicated server learns the
// count at rank 0, from worker 0's run. The untimed steps were 10% of a 200-step ps np 3 run's
// busy_s (1.32 ms a step against 0.31, 2026-12-02), which was the whole run's.
double timed_busy_s(nlohmann::json& stats, std::int64_t untimed) {
  double early = 0;
  if (auto it = stats.find("busy_untimed_s"); it != stats.end()) {
    if (untimed > 0 && it->is_array() && !it->empty())
      early = (*it)[std::min<std::size_t>(static_cast<std::size_t>(untimed), it->size()) - 1];
    stats.erase(it);
  }
  return stats.value("busy_s", 0.0) - early;
}

// This rank's totals for the summary (servers learn the step count from worker 0 via the
// summary). Times are the steady state's: without the first untimed steps (see TrainResult).
nlohmann::json rank_totals(const Config& cfg, Comm& world, const RankOutcome& out) {
  const TrainResult& res = out.result;
  nlohmann::json mine{{"rank", world.rank()}, {"role", out.role}};
  const CommCounters c = world.counters();
  nlohmann::json extra = out.backend_stats;
  // a dedicated server's: counted at rank 0 (see timed_busy_s); a co-located worker's shard's
  double busy_s = extra.value("busy_s", 0.0);
  if (extra.contains("shard")) busy_s = timed_busy_s(extra["shard"], res.untimed_steps);
  mine["bytes_sent"] = extra.value(
      "bytes_sent", static_cast<double>(out.role == "server" ? c.bytes_sent : res.bytes_sent));
  mine["bytes_recv"] = extra.value(
      "bytes_recv", static_cast<double>(out.role == "server" ? c.bytes_recv : res.bytes_recv));
  if (out.role != "server") {  // a co-located shard's set-up messages are not in res
    mine["setup_bytes_sent"] = res.setup_bytes_sent;
    mine["checkpoint_bytes_sent"] = res.checkpoint_bytes_sent;
    mine["checkpoint_bytes_recv"] = res.checkpoint_bytes_recv;
    mine["checkpoints"] = res.checkpoints;
    mine["checkpoint_s"] = res.checkpoint_s;
    mine["setup_bytes_recv"] =
        static_cast<double>(res.setup_bytes_recv) +
        extra.value("shard", nlohmann::json::object()).value("setup_bytes_recv", 0.0);
  } else {  // a dedicated server: its set-up, control and checkpoint messages
    mine["setup_bytes_sent"] = extra.value("control_bytes_sent", 0.0);
    mine["setup_bytes_recv"] = extra.value("setup_bytes_recv", 0.0);
  }
  mine["compute_s"] = res.timed_compute_s;
  mine["comm_s"] = res.timed_comm_s;
  mine["wait_s"] = res.timed_wait_s;
  mine["busy_s"] = busy_s;
  mine["steps"] = res.steps - res.resumed_step;  // trained by this run
  mine["untimed_steps"] = res.untimed_steps;
  mine["wall_s"] = res.timed_wall_s;
  mine["host"] = this_host_name();
  mine["cpus"] = usable_cpus();
  mine["cpu_ids"] = usable_cpu_ids();
  mine["all_steps_wall_s"] = res.wall_s;
  mine["samples"] = static_cast<double>(res.steps - res.resumed_step - res.untimed_steps) *
                    cfg.train.batch * cfg.train.accum;
  for (auto& [k, v] : res.extra) mine["extra"][k] = v;
  if (extra.contains("staleness_hist")) mine["staleness_hist"] = extra["staleness_hist"];
  if (!extra.empty()) mine["backend_stats"] = extra;
  return mine;
}

}  // namespace

int run_train(Config& cfg, std::shared_ptr<Comm> world) {
  finalize_config(cfg);
  world->set_timeout(Seconds(cfg.sync.timeout_s));
  Trace trace(world->rank(),
              cfg.out.trace_file.empty() ? "" : ps_role(cfg, world->rank(), world->size()));
  if (!cfg.out.trace_file.empty()) trace.open(cfg.out.trace_file);
  // Ctrl-C (mpirun passes SIGTERM to every rank): keep the timeline up to that moment, the
  // part a user stopping a slow or stuck run wants to see.
  std::unique_ptr<InterruptHook> keep_trace;
  if (trace.enabled())
    keep_trace = std::make_unique<InterruptHook>([&trace] { trace.close(); },
                                                 "writing the --trace events recorded so far");
  auto device = make_device(device_for_rank(cfg, world->rank(), world->size()), cfg.train.threads,
                            world->node_rank());
  RankOutcome out = run_rank(cfg, world, *device, &trace);
  const TrainResult& res = out.result;
  nlohmann::json mine = rank_totals(cfg, *world, out);
  keep_trace.reset();
  trace.close();
  // A stop request that did not stop the run came after the workers' last vote that could stop
  // it before its end, or during the final evaluation and checkpoint: the run ends as planned,
  // and says so (a user who sent SIGUSR1 expects exit 75 otherwise).
  mine["late_stop_request"] =
      res.stop_vote_on && res.stopped_at_step < 0 && (res.stop_asked || stop_requested());

  auto ranks = gather_to_root(*world, mine);
  std::string late;  // the ranks with such a request
  for (auto& r : ranks) {
    if (r.value("late_stop_request", false))
      late += (late.empty() ? "" : ", ") + std::to_string(r["rank"].get<int>());
    r.erase("late_stop_request");
  }
  if (res.stopped_at_step >= 0) {  // workers; dedicated servers return 0, below kStoppedExit
    if (!res.output_error.empty()) throw Error(res.output_error);
    if (world->rank() == 0) print_stop(cfg, res);
    return kStoppedExit;
  }
  if (world->rank() == 0) {
    const double steps = std::max<double>(res.steps - res.resumed_step, 1);
    for (auto& r : ranks) {
      r["bytes_sent_per_step"] = r["bytes_sent"].get<double>() / steps;
      r["bytes_recv_per_step"] = r["bytes_recv"].get<double>() / steps;
      for (const char* k : {"compute_s", "comm_s", "wait_s"}) r[k] = r[k].get<double>();
      if (r["role"] == "server" && r.contains("backend_stats")) {
        r["busy_s"] = timed_busy_s(r["backend_stats"], res.untimed_steps);
      }
    }
    auto summary = build_summary(cfg, res, world->size(), out.num_workers, ranks);
    // Where rank 0 computed (after any fallback: --device cuda without a GPU runs on the CPU).
    summary["device"] = device->is_gpu() ? "cuda" : "cpu";
    summary["device_name"] = device->name();
    if (res.diverged_step >= 0) summary["diverged_at_step"] = res.diverged_step;
    print_summary(summary);
    write_json_atomically(cfg.out.summary_file, summary);
    if (!late.empty()) print_late_stop(late, res.steps);
  }
  test_stop_point("summary", world->rank());
  // After the summary, so a failed metrics file or a diverged run does not cost its results too.
  if (!res.output_error.empty()) throw Error(res.output_error);
  if (world->rank() == 0 && res.diverged_step >= 0)
    throw Error(detail::concat("training diverged: the loss was not finite from step ",
                               res.diverged_step, " on (lower --lr, or more --warmup-steps)"));
  return 0;
}

}  // namespace starring
