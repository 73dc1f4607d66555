// One rank's part of a run: see train_run.h.
#include "experiments/train_run.h"

#include <cstdio>
#include <exception>

#include "common/comm_util.h"
#include "common/error.h"
#include "common/fault.h"
#include "experiments/backend_registry.h"
#include "ps/ps_group.h"

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

namespace {

std::string hex32(std::uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Every worker must hold the same data set (each reads its own --data-dir, a node's local copy):
// with another number of samples a worker took another number of steps, and the job ended in a
// timeout at a barrier (60 s, MPI_Abort, exit 1) that did not say why. The workers compare
// shapes (sample counts, features, classes; not the path, which may differ from node to node)
// and the files' CRC-32s (one node's copy of another version or a damaged one trained on other
// samples than the rest, silently):
// the lowest worker's goes to every rank, each compares its own, and the first mismatch goes to
// every rank, which throws it as one ConfigError. Dedicated servers (train == nullptr) pass.
void check_same_data(Comm& world, const Dataset* train, const Dataset* test, Seconds timeout) {
  std::string shape, mine;  // mine: "RANK\tSHAPE\tSOURCE"
  if (train) {
    shape = detail::concat(train->n, " training and ", test->n, " test samples of ", train->dim,
                           " features, ", train->classes, " classes");
    if (train->crc || test->crc)
      shape += " (CRC-32 " + hex32(train->crc) + "/" + hex32(test->crc) + ")";
    mine = detail::concat(world.rank(), "\t", shape, "\t", train->source);
  }
  const std::string first = first_error(world, mine, tags::kDataShape, timeout);
  std::string differs;
  const auto tab = first.find('\t'), tab2 = first.find('\t', tab + 1);
  if (train && tab2 != std::string::npos && first.substr(tab + 1, tab2 - tab - 1) != shape)
    differs = detail::concat("the workers' data differ: rank ", world.rank(), " has ", shape, " ('",
                             train->source, "'), rank ", first.substr(0, tab), " ",
                             first.substr(tab + 1, tab2 - tab - 1), " ('", first.substr(tab2 + 1),
                             "'); every rank must read the same data set");
  differs = first_error(world, differs, tags::kDataShape + 1, timeout);
  if (!differs.empty()) throw ConfigError(differs);
}

}  // namespace

Seconds load_allowance(const DataConfig& d) {
  // Floats one rank builds: the synthetic set drawn, or the whole (Fashion-)MNIST (70000 images of
  // 28 x 28, read and converted): every rank loads all of it, a server knows its size unread.
  const double floats =
      d.dataset == "synthetic"
          ? (static_cast<double>(d.synthetic_train) + d.synthetic_test) * d.synthetic_dim
          : 70000.0 * 784;
  return Seconds(5.0 + floats * sizeof(float) / 4e6);
}

std::string ps_role(const Config& cfg, int rank, int size) {
  if (cfg.sync.backend != "ps") return "";
  const ps::PsGroup g = ps::make_ps_group(cfg.sync.servers, size);
  const int w = g.worker_index(rank), s = g.server_index(rank);
  std::string role = w >= 0 ? "worker " + std::to_string(w) : "";
  if (s >= 0) role += (role.empty() ? "server " : " + server ") + std::to_string(s);
  return role;
}

bool is_dedicated_server(const Config& cfg, int rank, int size) {
  return cfg.sync.backend == "ps" && cfg.sync.servers != "colocated" &&
         ps::make_ps_group(cfg.sync.servers, size).is_dedicated_server(rank);
}

std::string device_for_rank(const Config& cfg, int rank, int size) {
  try {
    if (is_dedicated_server(cfg, rank, size)) return "cpu";
  } catch (const ConfigError&) {  // a bad --servers: run_rank says so, on every rank alike
  }
  return cfg.train.device;
}

RankOutcome run_rank(const Config& cfg, std::shared_ptr<Comm> world, Device& device, Trace* trace) {
  return run_rank(cfg, world, device, trace, nullptr, nullptr);
}

RankOutcome run_rank(const Config& cfg, std::shared_ptr<Comm> world, Device& device, Trace* trace,
                     const Dataset* train, const Dataset* test) {
  // The ranks that train load the data first, and every rank agrees before any backend starts:
  // a worker that cannot (a truncated or corrupt file) would otherwise leave dedicated servers
  // waiting for it. On failure the ranks that failed throw their own error and the other workers
  // one that names the lowest failing rank and holds its message (each rank may read a copy of
  // its own, on its node), so the job ends with one line and exit 2: experiments/main.cc prints
  // identical messages once, without a rank, and leaves out those a bystander's line wraps.
  // Dedicated servers, which load nothing, pass the message on as it is.
  const bool server = is_dedicated_server(cfg, world->rank(), world->size());
  std::pair<Dataset, Dataset> own;
  std::string failed;  // a failure_note (common/comm_util.h): its kind, rank and message
  std::exception_ptr mine;
  if (!server && (!train || !test)) {
    test_stop_point("load", world->rank());
    try {
      own = load_data(cfg);
    } catch (const std::exception& e) {  // bad input, or e.g. out of memory: still agreed
      mine = std::current_exception();
      failed = failure_note(e, world->rank());
    }
    train = &own.first;
    test = &own.second;
  }
  // Loading is work, not communication: a rank that loads a big data set on a loaded machine
  // may take longer than --timeout (9 ranks on 2 cores, 65536 synthetic samples each, missed
  // --timeout 3), so the others wait that long again plus an allowance for it, by the data's size.
  const Seconds allowance = load_allowance(cfg.data);
  try {
    failed = first_error(*world, failed, tags::kDataLoaded, world->timeout() + allowance);
  } catch (const TimeoutError& e) {
    if (mine) std::rethrow_exception(mine);  // its own bad file says more than a peer's silence
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.0f", allowance.count());
    throw TimeoutError(detail::concat(e.what(),
                                      " while every rank loaded its data (allowed: --timeout + ",
                                      secs, " s for its size)"));
  }
  if (!failed.empty()) {
    if (mine) std::rethrow_exception(mine);
    if (server) throw_failure(failed[0], failure_note_message(failed));
    throw_peer_failure(world->where(), failed, "could not load its data");
  }
  check_same_data(*world, server ? nullptr : train, server ? nullptr : test, world->timeout());
  BackendContext ctx{cfg, world, trace, &device};
  test_stop_point("backend-setup", world->rank());
  Backend be = BackendRegistry::instance().create(cfg.sync.backend, ctx);
  RankOutcome out;
  out.role = be.role;
  out.num_workers = be.num_workers;
  if (be.role == "server") {
    if (trace) trace->set_thread_name("server");
    be.serve();
  } else {
    Trainer trainer(cfg, TrainerEnv{*be.workers, *be.sync, device, trace});
    out.result = trainer.run(*train, *test);
    test_stop_point("sync-end", world->rank());
    be.sync->shutdown();
  }
  if (be.stats) out.backend_stats = be.stats();
  return out;
}

}  // namespace starring
