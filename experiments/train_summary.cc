// The run summary of `starring train` (experiments/train_summary.h).
#include "experiments/train_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "common/error.h"
#include "common/gpu_assignment.h"
#include "experiments/commands.h"
#include "experiments/host_cpus.h"
#include "trainer/checkpoint.h"
#include "trainer/metrics.h"

namespace starring {
namespace {

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Checkpoints (--checkpoint-dir): how many this run wrote and the seconds its training loop spent
// in them, which wall_s and step_time leave out (as they leave out evaluation): worker 0 gathers
// the state (from the servers under PS) and writes the file, the other workers wait for it at
// barriers (null with one worker). first_step_unix: rank 0's wall clock at the first step.
void add_checkpoint_cost(nlohmann::json& j, const TrainResult& res,
                         const std::vector<nlohmann::json>& ranks) {
  double others = -1;
  for (auto& r : ranks)
    if (r["role"] != "server" && r["rank"] != 0)
      others = std::max(others, r.value("checkpoint_s", 0.0));
  j["checkpoints"] = res.checkpoints;
  j["checkpoint_s"] = {{"worker0", res.checkpoint_s},
                       {"others_max", others < 0 ? nlohmann::json() : nlohmann::json(others)}};
  j["first_step_unix"] = res.first_step_unix;
}

// " checkpoints 10 in 0.07 s ..." for a run that wrote any.
std::string checkpoint_line(const nlohmann::json& j) {
  if (j.value("checkpoints", 0) <= 0) return "";
  const auto& c = j["checkpoint_s"];
  char line[192];
  std::snprintf(line, sizeof line,
                "checkpoints %d: %.3f s on worker 0%s (outside the wall time above)\n",
                j["checkpoints"].get<int>(), c["worker0"].get<double>(),
                c["others_max"].is_number()
                    ? (", the others waited up to " +
                       std::to_string(std::lround(c["others_max"].get<double>() * 1000)) + " ms")
                          .c_str()
                    : "");
  return line;
}

// The whole job, every leg of a resumed one (the top-level steps' figures, wall_s and
// samples_per_s are this run's): the runs that trained its steps, its steps, their training
// seconds, each run's slowest worker's (wall_s's clock: the earlier runs' from the checkpoint up
// to its step, this run's wall_s; restarts, evaluation, checkpoints and steps redone after a
// failure are not counted), the same per run (leg_train_s; null when a checkpoint of an older
// build did not record them), the throughput over them, and the history entries the earlier runs
// evaluated. legs 0 (null figures): resumed from a checkpoint of an older build, which did not
// record the job; the history is this run's.
void add_job(nlohmann::json& j, const TrainResult& res, std::int64_t global_batch) {
  const bool known = res.legs > 0;
  const double train_s = res.earlier_train_s + j["wall_s"].get<double>();
  nlohmann::json legs_s;  // null unless every earlier run's figure is known
  if (known && res.earlier_leg_train_s.size() + 1 == static_cast<std::size_t>(res.legs)) {
    legs_s = res.earlier_leg_train_s;
    legs_s.push_back(j["wall_s"]);
  }
  j["job"] = {
      {"legs", known ? nlohmann::json(res.legs) : nlohmann::json()},
      {"steps", res.steps},
      {"train_s", known ? nlohmann::json(train_s) : nlohmann::json()},
      {"leg_train_s", legs_s},
      {"samples_per_s", known && train_s > 0 ? nlohmann::json(res.steps * global_batch / train_s)
                                             : nlohmann::json()},
      {"epochs_by_earlier_legs", res.earlier_epochs}};
}

// The figures summed or maxed over the ranks: wall time and throughput (the slowest worker's),
// step-time breakdown (mean over workers), bytes per step (mean and busiest, workers and
// servers) and the staleness histogram.
void add_rank_figures(nlohmann::json& j, const TrainResult& res, std::int64_t global_batch,
                      const std::vector<nlohmann::json>& ranks) {
  const double steps = std::max<double>(res.steps - res.resumed_step, 1);
  double sums[4] = {0, 0, 0, 0};  // worker sent, recv, server sent, recv
  // The worker that sent most and the server that received most: rank, sent, recv (the means
  // hide --ps-partition tensor's imbalance, of dedicated servers and co-located shards alike).
  double busiest[2][3] = {{-1, -1, 0}, {-1, 0, -1}};
  double tsum[4] = {0, 0, 0, 0};  // compute, comm, wait, wall per timed step (over workers)
  double max_wall = 0, samples = 0, max_all_wall = 0, untimed = 0;
  int nw = 0, ns = 0;
  nlohmann::json hist = nlohmann::json::object();
  for (auto& r : ranks) {
    const bool server = r["role"] == "server";
    (server ? ns : nw)++;
    sums[server ? 2 : 0] += r["bytes_sent_per_step"].get<double>();
    sums[server ? 3 : 1] += r["bytes_recv_per_step"].get<double>();
    double* top = busiest[server ? 1 : 0];
    const double sent = r["bytes_sent_per_step"].get<double>();
    const double recv = r["bytes_recv_per_step"].get<double>();
    if ((server ? recv > top[2] : sent > top[1])) {
      top[0] = r["rank"].get<double>();
      top[1] = sent;
      top[2] = recv;
    }
    if (!server) {
      const double wall = r.value("wall_s", 0.0);
      const double timed = std::max(r.value("steps", 0.0) - r.value("untimed_steps", 0.0), 1.0);
      tsum[0] += r["compute_s"].get<double>() / timed;
      tsum[1] += r["comm_s"].get<double>() / timed;
      tsum[2] += r["wait_s"].get<double>() / timed;
      tsum[3] += wall / timed;
      max_wall = std::max(max_wall, wall);
      max_all_wall = std::max(max_all_wall, r.value("all_steps_wall_s", wall));
      samples += r.value("samples", 0.0);
      untimed = std::max(untimed, r.value("untimed_steps", 0.0));
    }
    if (r.contains("staleness_hist"))
      for (auto& [k, v] : r["staleness_hist"].items())
        hist[k] = hist.value(k, 0.0) + v.get<double>();
  }
  nw = std::max(nw, 1);
  // Throughput of the job: every sample every worker trained, over the slowest worker's training
  // time (under asp/ssp workers finish at different times; under bsp these all agree).
  // Throughput and step times leave out the first untimed steps (--untimed-steps); wall_s is the
  // whole training loop's.
  j["wall_s"] = max_all_wall;
  j["samples_per_s"] = max_wall > 0 ? samples / max_wall : 0.0;
  j["untimed_steps"] = static_cast<long long>(untimed);
  j["samples_per_s_all_steps"] =
      max_all_wall > 0 && res.steps > res.resumed_step ? steps * global_batch / max_all_wall : 0.0;
  // other: the training thread's time in none of compute and wait (the loop's own work between
  // steps: the step's bookkeeping, worker 0's metrics line and the gathering of every worker's
  // loss for it, the stop vote), so that total = compute + wait + other. On 3 ranks time-sharing
  // 2 cores it was 18-44% of worker 0's step (2026-12-01), while the line said total = compute +
  // wait.
  j["step_time"] = {{"total_s", tsum[3] / nw},
                    {"compute_s", tsum[0] / nw},
                    {"comm_s", tsum[1] / nw},
                    {"wait_s", tsum[2] / nw},
                    {"other_s", (tsum[3] - tsum[0] - tsum[2]) / nw}};
  j["bytes_per_step"] = {
      {"worker_sent", sums[0] / nw},
      {"worker_recv", sums[1] / nw},
      {"server_sent", ns ? sums[2] / ns : 0.0},
      {"server_recv", ns ? sums[3] / ns : 0.0},
      {"worker_sent_busiest", busiest[0][1]},
      {"worker_recv_busiest", busiest[0][2]},
      {"worker_busiest_rank", std::lround(busiest[0][0])},
      {"server_sent_busiest", ns ? busiest[1][1] : 0.0},
      {"server_recv_busiest", ns ? busiest[1][2] : 0.0},
      {"server_busiest_rank", ns ? nlohmann::json(std::lround(busiest[1][0])) : nlohmann::json()}};
  j["staleness_hist"] = hist;
}

// " (601-900 in this run)" after a resumed run's step count: its wall time and throughput
// cover only the steps it ran, which "steps 900  wall 0.31 s" alone hid. A run resumed from the
// last step of a finished one trains none (it read "(4681-4680 in this run)").
std::string resumed_steps(const nlohmann::json& j) {
  const long long at = j.value("resumed_at_step", 0LL), steps = j["steps"].get<long long>();
  if (at <= 0 || !j["resumed_from"].is_string()) return "";
  if (at >= steps) return " (none in this run: it resumed after the last step)";
  return " (" + std::to_string(at + 1) + "-" + std::to_string(steps) + " in this run)";
}

// "bytes per worker per step: sent X  recv Y" (dedicated servers: "recv X  sent Y"), and the
// busiest rank when it is over 1% above the mean: under --ps-partition tensor the mean read as
// the balanced theory while one co-located worker (np 4) moved 2556584 against a mean 1411020.
std::string bytes_line(const nlohmann::json& j, const std::string& role) {
  const bool server = role == "server";
  if (server &&
      (j["backend"] != "ps" || j["servers"] == "colocated" || j["num_servers"].get<int>() < 1))
    return "";
  const auto& b = j["bytes_per_step"];
  const auto pair = [&](const std::string& suffix) {
    const double sent = b.value(role + "_sent" + suffix, 0.0);
    const double recv = b.value(role + "_recv" + suffix, 0.0);
    char text[96];
    std::snprintf(text, sizeof text, server ? "recv %.0f  sent %.0f" : "sent %.0f  recv %.0f",
                  server ? recv : sent, server ? sent : recv);
    return std::string(text);
  };
  const std::string key = role + (server ? "_recv" : "_sent");
  const double mean = b[key].get<double>(), top = b.value(key + "_busiest", mean);
  std::string line = "bytes per " + role + " per step: " + pair("");
  if (std::abs(top - mean) > 0.01 * mean)
    line += " (mean of " +
            std::to_string(server ? j["num_servers"].get<int>() : j["workers"].get<int>()) +
            "; busiest, rank " + std::to_string(b.value(role + "_busiest_rank", -1)) + ": " +
            pair("_busiest") + ")";
  return line + "\n";
}

// A resumed run: which run of the job this is, and the job's figures beside this run's.
std::string job_line(const nlohmann::json& j) {
  if (!j["resumed_from"].is_string()) return "";
  const long long at = j["resumed_at_step"].get<long long>();
  const std::string from =
      "resumed from " + j["resumed_from"].get<std::string>() + " at step " + std::to_string(at);
  // The settings it changed, which the progress notes alone told (not under --progress off).
  const std::string changes = j.contains("resumed_with_changes")
                                  ? "with other settings than the checkpoint's run (from step " +
                                        std::to_string(at + 1) +
                                        "): " + j["resumed_with_changes"].get<std::string>() + "\n"
                                  : "";
  const auto& job = j["job"];
  if (!job["legs"].is_number())
    return from +
           " (a checkpoint of an older build: the job's earlier epochs and time are unknown, "
           "the history is this run's)\n" +
           changes;
  const auto earlier = job["epochs_by_earlier_legs"].get<std::size_t>();
  const auto& h = j["history"];
  std::string epochs;
  if (earlier == 1)
    epochs = "; the history's epoch " + std::to_string(h[0]["epoch"].get<int>()) +
             " comes from an earlier run";
  else if (earlier > 1)
    epochs = "; the history's epochs " + std::to_string(h[0]["epoch"].get<int>()) + "-" +
             std::to_string(h[earlier - 1]["epoch"].get<int>()) + " come from earlier runs";
  char line[256];
  std::snprintf(line, sizeof line,
                "\nthe whole job (run %d of it): %lld steps, %.2f s of training, %.0f samples/s "
                "(restarts, evaluation, checkpoints and steps redone not counted)",
                job["legs"].get<int>(), job["steps"].get<long long>(), job["train_s"].get<double>(),
                job["samples_per_s"].is_number() ? job["samples_per_s"].get<double>() : 0.0);
  return from + line + epochs + "\n" + changes;
}

// " (2 workers x 64 x accum 2)": what the global batch is made of, as a DDP user reads it.
std::string batch_parts(const nlohmann::json& j) {
  const int workers = j["workers"].get<int>(), accum = j["accum"].get<int>();
  if (workers == 1 && accum == 1) return "";
  return " (" + std::to_string(workers) + " worker" + (workers == 1 ? "" : "s") + " x " +
         std::to_string(j["batch"].get<int>()) +
         (accum > 1 ? " x accum " + std::to_string(accum) : std::string()) + ")";
}

}  // namespace

nlohmann::json build_summary(const Config& cfg, const TrainResult& res, int world_size, int workers,
                             const std::vector<nlohmann::json>& ranks) {
  nlohmann::json j;
  j["schema"] = "starring.run.v1";
  j["run_name"] = cfg.out.run_name;
  j["date"] = now_iso();
  j["host"] = this_host_name();
  j["git"] = build_commit();
  j["backend"] = cfg.sync.backend;
  j["servers"] = cfg.sync.backend == "ps" ? nlohmann::json(cfg.sync.servers) : nlohmann::json();
  j["consistency"] = cfg.sync.consistency;
  j["staleness"] = cfg.sync.staleness;
  j["compress"] = cfg.sync.compress;
  j["bucket_mb"] = cfg.sync.bucket_mb;
  j["overlap"] = cfg.sync.overlap;
  if (cfg.sync.backend == "ps") j["ps_shared_memory"] = cfg.sync.ps_shared_memory;
  j["straggler"] = cfg.train.straggler;
  j["world_size"] = world_size;
  j["workers"] = workers;
  j["num_servers"] = world_size - workers;
  // rank 0's host's CPUs, as its ranks may use them together (not rank 0's alone: bound ranks)
  j["cores"] = ranks.empty() ? usable_cpus() : host_cpus(ranks, ranks[0].value("host", ""));
  const std::string over = oversubscription(ranks);
  j["oversubscribed"] = !over.empty();
  if (!over.empty()) j["oversubscribed_where"] = over;
  j["dataset"] = cfg.data.dataset;
  j["model"] = {{"widths", res.widths},
                {"params", res.num_params},
                {"bytes", res.num_params * sizeof(float)}};
  j["batch"] = cfg.train.batch;
  j["accum"] = cfg.train.accum;
  j["global_batch"] = cfg.train.batch * cfg.train.accum * workers;
  j["lr"] = json_float(cfg.train.lr);
  j["epochs"] = res.history.empty() ? 0 : res.history.back().epoch;
  j["steps"] = res.steps;
  // A resumed run: per-step figures are over the steps this run trained.
  j["resumed_from"] =
      res.resumed_from.empty() ? nlohmann::json() : nlohmann::json(res.resumed_from);
  j["resumed_at_step"] = res.resumed_step;
  // "--lr 0.01 (0.02 in the checkpoint), ...": only when a resumed run changed such a setting
  if (!res.resumed_with_changes.empty()) j["resumed_with_changes"] = res.resumed_with_changes;
  add_rank_figures(j, res, cfg.train.batch * cfg.train.accum * workers, ranks);
  j["ranks"] = ranks;
  j["test_accuracy"] = res.test_accuracy;
  j["test_loss"] = res.test_loss;
  j["final_train_loss"] = res.final_train_loss;
  j["history"] = history_json(res.history);
  add_checkpoint_cost(j, res, ranks);
  add_job(j, res, cfg.train.batch * cfg.train.accum * workers);
  return j;
}

void print_summary(const nlohmann::json& j) {
  auto& st = j["step_time"];
  std::printf(
      "\n== StarRing train summary ==\n"
      "backend %s  workers %d  servers %s  model %s (%zu params)  global batch %lld%s\n"
      "steps %lld%s  wall %.2f s  throughput %.0f samples/s%s\n%s"
      "step time %.2f ms = compute %.2f + wait %.2f + other %.2f ms  (backend comm %.2f ms, may "
      "overlap)\n"
      "%s%s"
      "test accuracy %.4f  test loss %.4f\n%s%s",
      j["backend"].get<std::string>().c_str(), j["workers"].get<int>(),
      j["servers"] == "colocated" ? "colocated"
                                  : std::to_string(j["num_servers"].get<int>()).c_str(),
      j["model"]["widths"].dump().c_str(), j["model"]["params"].get<std::size_t>(),
      j["global_batch"].get<long long>(), batch_parts(j).c_str(), j["steps"].get<long long>(),
      resumed_steps(j).c_str(), j["wall_s"].get<double>(), j["samples_per_s"].get<double>(),
      j["untimed_steps"].get<long long>() > 0
          ? (" (steps after the first " + std::to_string(j["untimed_steps"].get<long long>()) +
             "; all steps: " +
             std::to_string(std::lround(j["samples_per_s_all_steps"].get<double>())) + ")")
                .c_str()
          : "",
      j.contains("oversubscribed_where")
          ? ("time-shared: " + j["oversubscribed_where"].get<std::string>() +
             " (wall-clock figures measure the host as much as the backend)\n")
                .c_str()
          : "",
      st["total_s"].get<double>() * 1e3, st["compute_s"].get<double>() * 1e3,
      st["wait_s"].get<double>() * 1e3, st["other_s"].get<double>() * 1e3,
      st["comm_s"].get<double>() * 1e3, bytes_line(j, "worker").c_str(),
      bytes_line(j, "server").c_str(), j["test_accuracy"].get<double>(),
      j["test_loss"].get<double>(), checkpoint_line(j).c_str(), job_line(j).c_str());
  std::fflush(stdout);
}

// A run stopped by a stop request: no summary (the run is not over), where to resume instead.
void print_stop(const Config& cfg, const TrainResult& res) {
  std::string who;
  for (int w : res.stop_requested_by) who += (who.empty() ? "" : ", ") + std::to_string(w);
  const std::string metrics = cfg.out.metrics_file.empty()
                                  ? ""
                                  : "; the metrics so far stay in " + cfg.out.metrics_file +
                                        ".partial, which the resumed run continues";
  std::printf(
      "\n== StarRing train stopped ==\n"
      "stopped after step %lld on a stop request (SIGUSR1 or --fault stop) that worker(s) %s "
      "had at step %lld\ncheckpoint %s\nresume: the same command with --resume latest (or "
      "auto)%s\n",
      static_cast<long long>(res.stopped_at_step), who.c_str(),
      static_cast<long long>(res.stop_round), res.last_checkpoint.c_str(), metrics.c_str());
  std::fflush(stdout);
}

// A stop request on `ranks` that came too late to stop the run before its end.
void print_late_stop(const std::string& ranks, std::int64_t steps) {
  std::fprintf(stderr,
               "[starring] stop request (SIGUSR1 or --fault stop) on rank(s) %s came after the "
               "workers' last vote that could stop the run before its end (step %lld): it "
               "finished as planned, with nothing to resume\n",
               ranks.c_str(), static_cast<long long>(steps));
  std::fflush(stderr);
}

}  // namespace starring
